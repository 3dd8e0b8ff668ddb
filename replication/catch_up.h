// How a standby catches up with its primary: the primary's answer to a standby's Hello
// (docs/replication.md, "Catching up"), decided from the two logs' epoch histories as Kafka's
// followers do with leader epochs (KIP-101): the records of one epoch are the same on every node
// up to where that epoch ends on the primary, so the last epoch both logs know tells where the
// standby's log stops being a prefix of the primary's.
//
// A pure function: no I/O, no clock. Thread safety: none needed.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/types.h"

namespace sundial::replication {

using EpochHistory = std::vector<EpochStart>;  // oldest first; epochs and LSNs increasing

struct LogPosition {
  EpochHistory history;
  uint64_t end_lsn = 0;  // one past the last record
};

enum class CatchUpKind : uint8_t {
  kStream,    // the standby's log is a prefix of the primary's: send records from `lsn`
  kTruncate,  // the standby keeps the records below `lsn` (its divergent tail goes), then dials
              // again
  kSnapshot,  // the primary lacks what the standby needs (or the standby has a foreign log)
};

struct CatchUp {
  CatchUpKind kind = CatchUpKind::kSnapshot;
  uint64_t lsn = 0;
  friend bool operator==(const CatchUp&, const CatchUp&) = default;
};

// `oldest_retained`: the first LSN the primary can still send from its segments (records below
// it were checkpointed away).
CatchUp DecideCatchUp(const LogPosition& primary, uint64_t oldest_retained,
                      const LogPosition& standby);

// Where `epoch` ends in `log`: the start of the next epoch, or the log's end. REQUIRES: `epoch`
// is in log.history.
uint64_t EpochEnd(const LogPosition& log, uint64_t epoch);

}  // namespace sundial::replication
