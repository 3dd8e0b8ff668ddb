// Fuzz target: the bytes a TCP client sends. They are split into frames as server/tcp.cc does
// (protocol::NextFrame), each frame is verified as a Request and dispatched into an in-memory
// engine and log (dispatch_harness.h); a frame the session would refuse ends the connection,
// as it does there. Seeds: tests/fuzz/tcp_frame/corpus (make_seeds.cc), dictionary
// tests/fuzz/tcp_frame.dict.
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "protocol/framing.h"
#include "tests/fuzz/dispatch_harness.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sundial;
  fuzz::DispatchHarness harness;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  std::string aligned;  // FlatBuffers reads in place and needs 8-byte alignment, as in tcp.cc
  // Small enough that a long input is several frames, large enough for any seed.
  constexpr uint32_t kMaxFrameBytes = 1u << 20;
  while (true) {
    std::string_view frame;
    size_t consumed = 0;
    const auto status = protocol::NextFrame(in, kMaxFrameBytes, &frame, &consumed);
    if (status != protocol::FrameStatus::kComplete) break;  // incomplete, or refused: closed
    if (consumed != frame.size() + protocol::kFrameHeaderBytes || consumed > in.size()) {
      fuzz::Fail("NextFrame consumed what it did not return");
    }
    in.remove_prefix(consumed);
    aligned.assign(frame);
    if (!protocol::VerifyRequest(aligned)) break;  // the session refuses it and closes
    harness.Handle(aligned, server::Transport::kTcp);
  }
  harness.CheckRecovery();
  return 0;
}
