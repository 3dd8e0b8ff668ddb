#include "protocol/framing.h"

namespace sundial::protocol {

void AppendFrame(std::string_view payload, std::string* out) {
  const auto n = static_cast<uint32_t>(payload.size());
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  out->append(payload);
}

FrameStatus NextFrame(std::string_view buffer, uint32_t max_frame_bytes, std::string_view* frame,
                      size_t* consumed) {
  if (buffer.size() < kFrameHeaderBytes) return FrameStatus::kIncomplete;
  uint32_t n = 0;
  for (int i = 0; i < 4; ++i) n |= uint32_t{static_cast<uint8_t>(buffer[i])} << (8 * i);
  if (n == 0) return FrameStatus::kEmpty;
  if (n > max_frame_bytes) return FrameStatus::kTooLarge;
  if (buffer.size() - kFrameHeaderBytes < n) return FrameStatus::kIncomplete;
  *frame = buffer.substr(kFrameHeaderBytes, n);
  *consumed = kFrameHeaderBytes + n;
  return FrameStatus::kComplete;
}

}  // namespace sundial::protocol
