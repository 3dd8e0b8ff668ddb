// EffectPipeline: what it returns on its second thread is exactly what a LogReader plus
// DecodeEffect would return on one, in order, whatever the record sizes; the reader's final
// state (damage, valid bytes, next LSN) is the same; stopping early joins the thread.
#include "wal/effect_pipeline.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/wal/wal_test_util.h"
#include "wal/effect_codec.h"

namespace sundial::wal::test {
namespace {

// Encodings of many message effects of varied sizes, one undecodable payload among them, and
// one record larger than a whole batch's byte budget.
std::vector<std::string> ManyPayloads() {
  std::vector<std::string> out;
  for (int i = 0; i < 6000; ++i) {
    Effect e;
    e.type = EffectType::kMessageEnqueued;
    e.queue = "q";
    const std::string id = "m" + std::to_string(i);
    e.id = id;
    e.seq = static_cast<uint64_t>(i) + 1;
    e.version = 1;
    std::string payload(static_cast<size_t>((i * 7919) % (i % 500 == 0 ? 200'000 : 700)), 'p');
    if (i == 4321) payload.assign(3 << 20, 'L');  // bigger than a batch
    e.payload = payload;
    e.packed_metadata = std::string_view("\0", 1);
    out.push_back(Encode(e));
    if (i == 2500) out.push_back("not an effect");
  }
  return out;
}

struct Seen {
  std::vector<uint64_t> offsets, lsns;
  std::vector<std::string> payloads;
  std::vector<bool> decoded;
  std::vector<std::string> ids;
  std::optional<Corruption> damage;
  uint64_t valid_bytes = 0, next_lsn = 0;
};

Seen ReadPlainly(const std::string& bytes) {
  Seen seen;
  LogReader reader(std::make_unique<StringSequentialFile>(bytes), "wal-0000000000000001.log",
                   nullptr, {});
  LogReader::Record record;
  while (reader.ReadRecord(&record)) {
    seen.offsets.push_back(record.offset);
    seen.lsns.push_back(record.lsn);
    seen.payloads.emplace_back(record.payload);
    DecodedEffect decoded;
    const bool ok = DecodeEffect(record.payload, &decoded).ok();
    seen.decoded.push_back(ok);
    seen.ids.emplace_back(ok ? decoded.effect().id : "");
  }
  seen.damage = reader.damage();
  seen.valid_bytes = reader.valid_bytes();
  seen.next_lsn = reader.next_lsn();
  return seen;
}

Seen ReadThroughPipeline(const std::string& bytes, bool threaded) {
  Seen seen;
  LogReader reader(std::make_unique<StringSequentialFile>(bytes), "wal-0000000000000001.log",
                   nullptr, {});
  EXPECT_TRUE(reader.ReadHeader());
  {
    EffectPipeline pipeline(&reader, threaded);
    while (const EffectPipeline::Item* item = pipeline.Next()) {
      seen.offsets.push_back(item->offset);
      seen.lsns.push_back(item->lsn);
      seen.payloads.emplace_back(item->payload);
      seen.decoded.push_back(item->decoded);
      seen.ids.emplace_back(item->decoded ? item->effect.id : "");
    }
    seen.damage = reader.damage();
    seen.valid_bytes = reader.valid_bytes();
    seen.next_lsn = reader.next_lsn();
  }
  return seen;
}

void ExpectSame(const Seen& a, const Seen& b) {
  ASSERT_EQ(a.offsets, b.offsets);
  EXPECT_EQ(a.lsns, b.lsns);
  EXPECT_TRUE(a.payloads == b.payloads);
  EXPECT_EQ(a.decoded, b.decoded);
  EXPECT_EQ(a.ids, b.ids);
  ASSERT_EQ(a.damage.has_value(), b.damage.has_value());
  if (a.damage) {
    EXPECT_EQ(a.damage->offset, b.damage->offset);
    EXPECT_EQ(a.damage->kind, b.damage->kind);
  }
  EXPECT_EQ(a.valid_bytes, b.valid_bytes);
  EXPECT_EQ(a.next_lsn, b.next_lsn);
}

TEST(EffectPipelineTest, ReturnsWhatTheReaderAndDecoderReturnInOrder) {
  const WrittenLog log = WriteLog(ManyPayloads());
  const Seen plain = ReadPlainly(log.bytes);
  ASSERT_EQ(plain.offsets.size(), 6001u);
  EXPECT_EQ(std::count(plain.decoded.begin(), plain.decoded.end(), false), 1);
  for (bool threaded : {false, true}) {
    SCOPED_TRACE(threaded ? "threaded" : "inline");
    ExpectSame(ReadThroughPipeline(log.bytes, threaded), plain);
  }
}

TEST(EffectPipelineTest, DamageAndATornTailEndItAsTheyEndTheReader) {
  const WrittenLog log = WriteLog(ManyPayloads());
  std::string damaged = log.bytes;
  FlipByte(&damaged, log.record_offsets[3000] + kRecordHeaderBytes + 1);
  std::string torn = log.bytes.substr(0, log.record_offsets[5000] + 20);
  for (const std::string* bytes : {&damaged, &torn}) {
    const Seen plain = ReadPlainly(*bytes);
    ASSERT_TRUE(plain.damage);
    for (bool threaded : {false, true}) {
      SCOPED_TRACE(threaded ? "threaded" : "inline");
      ExpectSame(ReadThroughPipeline(*bytes, threaded), plain);
    }
  }
}

TEST(EffectPipelineTest, StoppingEarlyJoinsTheReadingThread) {
  const WrittenLog log = WriteLog(ManyPayloads());
  LogReader reader(std::make_unique<StringSequentialFile>(log.bytes), "wal-0000000000000001.log",
                   nullptr, {});
  ASSERT_TRUE(reader.ReadHeader());
  {
    EffectPipeline pipeline(&reader, /*threaded=*/true);
    for (int i = 0; i < 10; ++i) ASSERT_NE(pipeline.Next(), nullptr);
  }  // destroyed mid-file: the thread stops and is joined
  SUCCEED();
}

}  // namespace
}  // namespace sundial::wal::test
