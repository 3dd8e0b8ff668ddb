// Verification of a Request FlatBuffer before anything reads it: the one place where the limits
// on untrusted input are set, shared by the TCP and WebSocket sessions and the fuzz targets (so
// the fuzzers test the setting the server uses, not a copy of it).
//
// Limits: a table nesting depth of 32 (a Request is at most 4 deep: Request → op → item →
// metadata pair) and 1,000,000 tables (1,000 items of 16 pairs each fit with room to spare),
// on top of FlatBuffers' own checks of every offset, length and string within the buffer.
//
// Thread safety: a pure function. Cost: linear in the buffer, no allocation.
#pragma once

#include <string_view>

namespace sundial::protocol {

// Whether `bytes` is a well-formed Request that the server may read in place. REQUIRES:
// `bytes.data()` is 8-byte aligned (FlatBuffers reads its longs in place).
bool VerifyRequest(std::string_view bytes);

}  // namespace sundial::protocol
