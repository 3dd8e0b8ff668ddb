// What the tcp_frame and ws_json fuzz targets share: an in-memory server without sockets. An
// engine logs to a GroupCommitLog on the memory file system (FsyncPolicy::kNever: no sync
// thread, so a run is deterministic), requests go through the checks the transports make
// (the FlatBuffers verifier with the limits of server/tcp.cc and server/http.cc) and through
// Dispatcher::Handle, and every reply must verify as a ServerMessage. At the end the log is
// recovered into a second engine, whose digest must equal the live engine's: whatever a
// request did, the log must reproduce it.
#pragma once

#include <flatbuffers/flatbuffers.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "engine/clock.h"
#include "engine/engine.h"
#include "protocol/sundial_generated.h"
#include "protocol/verify.h"
#include "server/dispatch.h"
#include "wal/file.h"
#include "wal/group_commit_log.h"
#include "wal/recovery.h"

namespace sundial::fuzz {

inline constexpr TimeMs kFuzzStartMs = 1'700'000'000'000;

inline Engine::Options FuzzEngineOptions() {
  Engine::Options o;
  o.shards = 2;
  o.seed = 14;
  o.memory_budget_bytes = 64ull << 20;  // a request that asks for more is refused, not a finding
  return o;
}

[[noreturn]] inline void Fail(const char* what, std::string_view detail = {}) {
  std::fprintf(stderr, "fuzz: %s %.*s\n", what, static_cast<int>(detail.size()), detail.data());
  std::abort();
}

class DispatchHarness {
 public:
  DispatchHarness() : fs_(wal::NewMemoryFileSystem()) {
    wal::OpenedLog opened;
    wal::LogOptions log_options;
    log_options.policy = wal::FsyncPolicy::kNever;
    log_options.preallocate_bytes = 0;
    log_options.segment_bytes = 64u << 10;  // long inputs rotate segments
    const Status s = wal::RecoverAndOpenLog(
        fs_.get(), "data",
        [&] { return std::make_unique<Engine>(FuzzEngineOptions(), &clock_, &sink_); }, {},
        log_options, &sink_, &opened);
    if (!s.ok()) Fail("opening the log:", s.detail());
    engine_ = std::move(opened.engine);
    log_ = std::move(opened.log);
    dispatcher_ = std::make_unique<server::Dispatcher>(engine_.get(), log_.get());
  }

  // Runs one request (already verified) as a session of `transport` would; returns the reply.
  std::string_view Handle(std::string_view request_bytes, server::Transport transport) {
    const auto* request = flatbuffers::GetRoot<protocol::Request>(request_bytes.data());
    const auto outcome = dispatcher_->Handle(*request, transport, nullptr, &builder_);
    flatbuffers::Verifier check(reinterpret_cast<const uint8_t*>(outcome.response.data()),
                                outcome.response.size());
    if (!check.VerifyBuffer<protocol::ServerMessage>(nullptr)) Fail("reply does not verify");
    const auto* response =
        flatbuffers::GetRoot<protocol::ServerMessage>(outcome.response.data())->body_as_Response();
    if (response == nullptr || response->request_id() != request->request_id()) {
      Fail("the reply is not a Response to this request");
    }
    if (response->error() != nullptr && response->error()->message() == nullptr) {
      Fail("an error without a message");
    }
    if (outcome.wait_lsn > log_->AppendedEndLsn()) Fail("reply waits for an LSN never appended");
    // Time moves on between requests: leases expire, invisible messages appear, retention runs.
    clock_.Advance(1'000);
    engine_->Advance(clock_.NowMs());
    return outcome.response;
  }

  Engine& engine() { return *engine_; }
  wal::FileSystem* fs() { return fs_.get(); }  // the log is in "data"

  // Everything the requests logged must recover to the same state. Closes the log.
  void CheckRecovery() {
    const uint64_t live = engine_->Digest();
    if (Status s = log_->Flush(); !s.ok()) Fail("flush:", s.detail());
    if (Status s = log_->Close(); !s.ok()) Fail("close:", s.detail());
    ManualClock clock(clock_.NowMs());
    wal::Recovered recovered;
    const Status s = wal::Recover(
        fs_.get(), "data",
        [&] { return std::make_unique<Engine>(FuzzEngineOptions(), &clock, nullptr); }, {},
        &recovered);
    if (!s.ok()) Fail("recovering what the requests logged:", recovered.report.Summary());
    if (recovered.engine->Digest() != live) Fail("the recovered state differs from the live one");
  }

 private:
  ManualClock clock_{kFuzzStartMs};
  wal::DeferredSink sink_;
  std::unique_ptr<wal::FileSystem> fs_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<wal::GroupCommitLog> log_;
  std::unique_ptr<server::Dispatcher> dispatcher_;
  flatbuffers::FlatBufferBuilder builder_;
};

}  // namespace sundial::fuzz
