// Framing of the binary TCP protocol (docs/protocol.md, "Binary TCP"): every frame is a u32le
// length followed by that many bytes of one FlatBuffer (a Request from a client, a ServerMessage
// from the server).
//
// NextFrame looks at the bytes received so far and splits off the first frame without copying.
// A length of 0 is malformed (no FlatBuffer is empty); a length above max_frame_bytes
// (--max-frame-bytes) is refused before anything is buffered for it, so a hostile length costs
// no memory. The caller answers both with an error and closes the connection.
//
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace sundial::protocol {

inline constexpr size_t kFrameHeaderBytes = 4;
inline constexpr uint32_t kDefaultMaxFrameBytes = 16u << 20;

// Appends the frame header and `payload` to `out`. REQUIRES: payload.size() < 2^32.
void AppendFrame(std::string_view payload, std::string* out);

enum class FrameStatus : uint8_t {
  kComplete,    // *frame is the first frame's payload; *consumed bytes make up the whole frame
  kIncomplete,  // more bytes are needed (a partial header or payload)
  kEmpty,       // a length of 0: malformed
  kTooLarge,    // the length exceeds max_frame_bytes
};

FrameStatus NextFrame(std::string_view buffer, uint32_t max_frame_bytes, std::string_view* frame,
                      size_t* consumed);

}  // namespace sundial::protocol
