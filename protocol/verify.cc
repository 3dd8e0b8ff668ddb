#include "protocol/verify.h"

#include "protocol/sundial_generated.h"

namespace sundial::protocol {

bool VerifyRequest(std::string_view bytes) {
  flatbuffers::Verifier::Options options;
  options.max_depth = 32;
  options.max_tables = 1'000'000;
  flatbuffers::Verifier verifier(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(),
                                 options);
  return VerifyRequestBuffer(verifier);
}

}  // namespace sundial::protocol
