// The replication protocol's messages (replication/replication.fbs; docs/replication.md,
// "The replication protocol"): building each one, and verifying a received frame before
// anything reads it (the same limits as a client Request: protocol/verify.h).
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/status.h"
#include "engine/types.h"

namespace sundial::replication {

namespace wire {
struct Frame;
}  // namespace wire

// Whether `bytes` is a well-formed Frame; REQUIRES: 8-byte aligned. The frame, or null.
const wire::Frame* VerifyFrame(std::string_view bytes);

struct HelloMessage {
  std::string cluster;
  std::string node;
  std::string token;
  uint64_t promised_epoch = 0;
  std::vector<EpochStart> history;
  uint64_t end_lsn = 0;
};
std::string EncodeHello(const HelloMessage& m);

enum class CatchUpWire : uint8_t { kStream = 0, kTruncate = 1, kSnapshot = 2 };
struct WelcomeMessage {
  uint64_t epoch = 0;
  CatchUpWire catch_up = CatchUpWire::kStream;
  uint64_t from_lsn = 0;
  uint64_t truncate_to = 0;
  uint64_t primary_end_lsn = 0;
};
std::string EncodeWelcome(const WelcomeMessage& m);

// `records`: consecutive framed records of segment `segment_number`, as on disk.
std::string EncodeRecords(uint64_t epoch, uint64_t segment_number, uint64_t first_lsn,
                          uint32_t count, std::string_view records, uint64_t durable_end);
std::string EncodeSnapshotChunk(uint64_t covered_lsn, uint64_t offset, std::string_view bytes,
                                bool last);
std::string EncodeHeartbeat(uint64_t epoch, uint64_t end_lsn, uint64_t durable_end);
std::string EncodeAck(uint64_t epoch, uint64_t flushed_end, uint64_t applied_end);
std::string EncodeRefusal(Code code, std::string_view message, uint64_t epoch);

}  // namespace sundial::replication
