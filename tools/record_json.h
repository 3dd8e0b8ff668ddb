// Record JSON: the JSON form of one log record, as `sundial-wal dump` prints it (one object per
// line; docs/tools.md, "dump"). Built with Boost.JSON, which does the escaping.
//
//   {"file":..., "offset":N, "index":N, "lsn":N | "covered_lsn":N, "record":"effect",
//    "effect":"message_enqueued", "time":N, "queue":"...", ...fields of that effect type}
//   {"file":..., ..., "record":"snapshot_trailer", "count":N, "digest":"<16 hex digits>"}
//
// Each effect type carries exactly the fields docs/wal-format.md logs for it; enum values are
// written by their names (EffectTypeName, ChangeCauseName, StateName, QueueTypeName). Integers are
// exact (64-bit, never rounded through a double). Text is written as a JSON string when it is
// valid UTF-8; otherwise field `x` is written as `x_base64` (RFC 4648 base64 of the raw bytes).
// Metadata is an object of its pairs when the packed form is well formed and every key and value
// is valid UTF-8, else `metadata_base64` holds the packed bytes.
//
// Thread safety: pure functions.
#pragma once

#include <boost/json/object.hpp>
#include <string>
#include <string_view>

#include "engine/effect.h"
#include "tools/log_directory.h"

namespace sundial::tools {

boost::json::object RecordToJson(const ScannedRecord& record);

// The effect's own fields (no file position), as in RecordToJson.
void AppendEffectJson(const Effect& effect, boost::json::object* out);

// Standard base64 (RFC 4648 §4) with padding.
std::string Base64Encode(std::string_view bytes);

}  // namespace sundial::tools
