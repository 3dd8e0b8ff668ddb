// Fuzz target: the replication port's untrusted bytes (docs/replication.md, "The replication
// protocol"). A real primary (PrimaryStream over a log of a few records) and a standby
// (StandbyStream, which promised epoch 3) talk in memory; the input is a script of what the
// network does to their frames, one operation per byte (with its operands after it):
//   0  deliver the primary's next frame as it is          4  the primary logs one more record
//   1  deliver it with one byte xored (offset u16, xor u8) 5  deliver the standby's Ack to the
//   2  deliver raw bytes instead (length u8, bytes)           primary, or a raw frame (u8 0/1)
//   3  drop it                                             6  a raw frame to the primary (Hello…)
// Whatever arrives, a standby never applies what its primary did not log: at every step its
// engine equals the primary's state at the standby's end LSN (when the primary passed through
// that LSN between operations), its log recovers to its engine, and its promise never goes back.
// The primary never counts an acknowledgement beyond what it logged.
// Seeds: tests/fuzz/replication_stream/corpus.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/clock.h"
#include "engine/engine.h"
#include "replication/primary_stream.h"
#include "replication/standby_stream.h"
#include "wal/file.h"
#include "wal/group_commit_log.h"
#include "wal/recovery.h"

namespace {

using namespace sundial;

class FuzzPromise final : public replication::EpochPromise {
 public:
  uint64_t promised() const override { return epoch; }
  Status Promise(uint64_t e) override {
    if (e < epoch) std::abort();  // a promise never goes back
    epoch = e;
    return Status::Ok();
  }
  uint64_t epoch = 3;
};

// Frames are read 8-byte aligned.
std::string_view Aligned(const std::string& bytes, std::vector<uint64_t>* words) {
  words->assign(bytes.size() / 8 + 1, 0);
  std::memcpy(words->data(), bytes.data(), bytes.size());
  return {reinterpret_cast<const char*>(words->data()), bytes.size()};
}

struct Node {
  Node() {
    auto opened = wal::GroupCommitLog::Open(fs.get(), "data", {}, 0, 1);
    if (!opened.ok()) std::abort();
    log = std::move(opened).value();
    Engine::Options o;
    o.shards = 2;
    o.seed = 21;
    engine = std::make_unique<Engine>(o, &clock, log.get());
  }
  std::unique_ptr<wal::FileSystem> fs = wal::NewMemoryFileSystem();
  ManualClock clock{1'700'000'000'000};
  std::unique_ptr<wal::GroupCommitLog> log;
  std::unique_ptr<Engine> engine;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Node p;
  std::map<uint64_t, uint64_t> digest_at;  // the primary's state after each of its operations
  digest_at[0] = p.engine->Digest();
  int serial = 0;
  auto log_one = [&] {
    EnqueueItem item;
    item.id = "m" + std::to_string(serial++);
    item.payload = "payload";
    (void)p.engine->Enqueue("q", {item});
    if (!p.log->WaitDurable(p.log->AppendedEndLsn()).ok()) std::abort();
    digest_at[p.log->AppendedEndLsn()] = p.engine->Digest();
  };
  if (!p.engine->StartEpoch(5, 0).ok()) std::abort();
  if (!p.log->WaitDurable(1).ok()) std::abort();
  digest_at[1] = p.engine->Digest();
  for (int i = 0; i < 4; ++i) log_one();

  replication::PrimaryEnv penv;
  penv.log = p.log.get();
  penv.engine = p.engine.get();
  penv.fs = p.fs.get();
  penv.dir = "data";
  penv.cluster = "c";
  penv.epoch = 5;
  penv.on_ack = [&](const std::string&, uint64_t end) {
    if (end > p.log->AppendedEndLsn()) std::abort();
  };
  replication::PrimaryStream primary(penv);

  Node s;
  FuzzPromise promise;
  replication::StandbyEnv senv;
  senv.log = s.log.get();
  senv.engine = s.engine.get();
  senv.promise = &promise;
  senv.fs = s.fs.get();
  senv.dir = "data";
  senv.cluster = "c";
  senv.node = "n2";
  replication::StandbyStream standby(senv);

  std::vector<uint64_t> words;
  std::vector<std::string> in_flight;  // the primary's frames not yet delivered
  bool standby_open = true;
  bool primary_open =
      primary.OnFrame(Aligned(standby.Hello(), &words)) != replication::PrimaryStream::Next::kClose;

  auto to_standby = [&](const std::string& frame) {
    if (!standby_open) return;
    using Next = replication::StandbyStream::Next;
    const Next next = standby.OnFrame(Aligned(frame, &words));
    if (next == Next::kAck) {
      if (!s.log->WaitDurable(s.log->AppendedEndLsn()).ok()) std::abort();
    } else if (next != Next::kContinue) {
      standby_open = false;  // closed, or asks its node to reload: it applies nothing more
    }
    const uint64_t end = s.log->AppendedEndLsn();
    if (auto it = digest_at.find(end); it != digest_at.end() && it->second != s.engine->Digest()) {
      std::abort();  // the standby holds a state its primary never had at that LSN
    }
    if (end > p.log->AppendedEndLsn()) std::abort();
  };
  auto to_primary = [&](const std::string& frame) {
    if (!primary_open) return;
    primary_open =
        primary.OnFrame(Aligned(frame, &words)) != replication::PrimaryStream::Next::kClose;
  };

  size_t i = 0;
  auto byte = [&]() -> uint8_t { return i < size ? data[i++] : 0; };
  for (int steps = 0; i < size && steps < 256; ++steps) {
    if (primary_open) primary.Produce(4096);
    for (std::string& f : primary.TakeOutput()) in_flight.push_back(std::move(f));
    const uint8_t op = byte() % 7;
    switch (op) {
      case 0:
      case 1:
      case 3: {
        if (in_flight.empty()) break;
        std::string frame = std::move(in_flight.front());
        in_flight.erase(in_flight.begin());
        if (op == 1 && !frame.empty()) {
          const size_t at = (size_t{byte()} | size_t{byte()} << 8) % frame.size();
          frame[at] = static_cast<char>(frame[at] ^ (byte() | 1));
        }
        if (op != 3) to_standby(frame);
        break;
      }
      case 2: {
        const size_t n = byte();
        std::string raw(reinterpret_cast<const char*>(data + i), std::min(n, size - i));
        i += raw.size();
        to_standby(raw);
        break;
      }
      case 4:
        log_one();
        break;
      case 5:
      case 6: {
        std::string frame;
        if (op == 5 && byte() % 2 == 0) {
          frame = standby.Ack();
        } else {
          const size_t n = byte();
          frame.assign(reinterpret_cast<const char*>(data + i), std::min(n, size - i));
          i += frame.size();
        }
        to_primary(frame);
        break;
      }
    }
  }

  // What the standby logged is what it applied: its log recovers to its engine's state.
  if (!s.log->Close().ok()) std::abort();
  const uint64_t standby_digest = s.engine->Digest();
  wal::Recovered recovered;
  ManualClock clock;
  const Status st = wal::Recover(
      s.fs.get(), "data",
      [&] {
        Engine::Options o;
        o.shards = 2;
        o.seed = 21;
        return std::make_unique<Engine>(o, &clock, nullptr);
      },
      {}, &recovered);
  if (!st.ok() || recovered.engine->Digest() != standby_digest) std::abort();
  return 0;
}
