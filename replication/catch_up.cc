#include "replication/catch_up.h"

#include <algorithm>

namespace sundial::replication {
namespace {

// The entry of `epoch` in `history`, or null.
const EpochStart* Find(const EpochHistory& history, uint64_t epoch) {
  for (const EpochStart& e : history) {
    if (e.epoch == epoch) return &e;
  }
  return nullptr;
}

}  // namespace

uint64_t EpochEnd(const LogPosition& log, uint64_t epoch) {
  for (size_t i = 0; i < log.history.size(); ++i) {
    if (log.history[i].epoch == epoch) {
      return i + 1 < log.history.size() ? log.history[i + 1].lsn : log.end_lsn;
    }
  }
  return log.end_lsn;
}

CatchUp DecideCatchUp(const LogPosition& primary, uint64_t oldest_retained,
                      const LogPosition& standby) {
  const auto from = [&](uint64_t lsn) {
    // What the primary no longer holds can only come from a snapshot.
    return lsn >= oldest_retained ? CatchUp{CatchUpKind::kStream, lsn}
                                  : CatchUp{CatchUpKind::kSnapshot, 0};
  };
  if (standby.end_lsn == 0) return from(0);  // an empty log is a prefix of every log
  if (standby.history.empty()) {
    // Records written outside any leadership of this cluster: nothing to compare them by.
    return {CatchUpKind::kSnapshot, 0};
  }
  // The standby's newest epoch that the primary's log also holds, starting at the same LSN.
  for (size_t i = standby.history.size(); i-- > 0;) {
    const EpochStart& mine = standby.history[i];
    const EpochStart* theirs = Find(primary.history, mine.epoch);
    if (theirs == nullptr || theirs->lsn != mine.lsn) continue;
    // The standby's records of this epoch end where its next epoch starts (or at its end);
    // the primary's where its next epoch starts (or at its end). Up to the smaller of the two
    // the logs are the same.
    const uint64_t standby_end =
        i + 1 < standby.history.size() ? standby.history[i + 1].lsn : standby.end_lsn;
    const uint64_t primary_end = EpochEnd(primary, mine.epoch);
    const uint64_t common = std::min(standby_end, primary_end);
    if (common == standby.end_lsn) return from(common);  // nothing beyond: a prefix
    // The standby holds records the primary does not: they were never acknowledged (a
    // durable reply needs the sync standby's copy, and the primary is that standby's
    // successor), so they go.
    return common >= oldest_retained ? CatchUp{CatchUpKind::kTruncate, common}
                                     : CatchUp{CatchUpKind::kSnapshot, 0};
  }
  // No epoch in common: the standby's log comes from another history.
  return {CatchUpKind::kSnapshot, 0};
}

}  // namespace sundial::replication
