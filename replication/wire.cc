#include "replication/wire.h"

#include <flatbuffers/flatbuffers.h>

#include "replication/replication_generated.h"

namespace sundial::replication {
namespace {

namespace fb = flatbuffers;

template <typename T>
std::string Finish(fb::FlatBufferBuilder& b, wire::Body type, fb::Offset<T> body) {
  b.Finish(wire::CreateFrame(b, type, body.Union()), wire::FrameIdentifier());
  return {reinterpret_cast<const char*>(b.GetBufferPointer()), b.GetSize()};
}

fb::Offset<fb::Vector<uint8_t>> Bytes(fb::FlatBufferBuilder& b, std::string_view bytes) {
  return b.CreateVector(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

}  // namespace

const wire::Frame* VerifyFrame(std::string_view bytes) {
  fb::Verifier::Options options;
  options.max_depth = 16;
  options.max_tables = 1'000'000;
  fb::Verifier verifier(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), options);
  if (!wire::VerifyFrameBuffer(verifier)) return nullptr;
  return wire::GetFrame(bytes.data());
}

std::string EncodeHello(const HelloMessage& m) {
  fb::FlatBufferBuilder b(256 + 16 * m.history.size());
  std::vector<wire::EpochStart> history;
  history.reserve(m.history.size());
  for (const EpochStart& e : m.history) history.emplace_back(e.epoch, e.lsn);
  auto hello = wire::CreateHelloDirect(b, m.cluster.c_str(), m.node.c_str(), m.token.c_str(),
                                       m.promised_epoch, &history, m.end_lsn);
  return Finish(b, wire::Body::Hello, hello);
}

std::string EncodeWelcome(const WelcomeMessage& m) {
  fb::FlatBufferBuilder b(128);
  auto welcome = wire::CreateWelcome(b, m.epoch, static_cast<wire::CatchUp>(m.catch_up), m.from_lsn,
                                     m.truncate_to, m.primary_end_lsn);
  return Finish(b, wire::Body::Welcome, welcome);
}

std::string EncodeRecords(uint64_t epoch, uint64_t segment_number, uint64_t first_lsn,
                          uint32_t count, std::string_view records, uint64_t durable_end) {
  fb::FlatBufferBuilder b(records.size() + 128);
  auto bytes = Bytes(b, records);
  auto body = wire::CreateRecords(b, epoch, segment_number, first_lsn, count, bytes, durable_end);
  return Finish(b, wire::Body::Records, body);
}

std::string EncodeSnapshotChunk(uint64_t covered_lsn, uint64_t offset, std::string_view bytes,
                                bool last) {
  fb::FlatBufferBuilder b(bytes.size() + 128);
  auto data = Bytes(b, bytes);
  return Finish(b, wire::Body::SnapshotChunk,
                wire::CreateSnapshotChunk(b, covered_lsn, offset, data, last));
}

std::string EncodeHeartbeat(uint64_t epoch, uint64_t end_lsn, uint64_t durable_end) {
  fb::FlatBufferBuilder b(64);
  return Finish(b, wire::Body::Heartbeat, wire::CreateHeartbeat(b, epoch, end_lsn, durable_end));
}

std::string EncodeAck(uint64_t epoch, uint64_t flushed_end, uint64_t applied_end) {
  fb::FlatBufferBuilder b(64);
  return Finish(b, wire::Body::Ack, wire::CreateAck(b, epoch, flushed_end, applied_end));
}

std::string EncodeRefusal(Code code, std::string_view message, uint64_t epoch) {
  fb::FlatBufferBuilder b(64 + message.size());
  auto text = b.CreateString(message);
  return Finish(b, wire::Body::Refusal,
                wire::CreateRefusal(b, static_cast<uint8_t>(code), text, epoch));
}

}  // namespace sundial::replication
