// NodeState: what a node of a cluster keeps about itself in its data directory, beside its log
// (docs/replication.md, "Fencing"): the cluster and node names the directory belongs to (a data
// directory is never joined to another cluster or given another name by mistake) and the
// highest epoch the node has promised. The promise is durable before Promise returns (a new
// file written, fsynced, renamed over the old one, the directory fsynced), so a node that
// crashes and restarts never acknowledges a record of an older epoch than one it promised.
//
// File: DIR/CLUSTER, one JSON object {"cluster","node","promised_epoch"}.
//
// Thread safety: Promise and promised() may be called from any thread (a mutex).
#pragma once

#include <cstdint>
#include <string>

#include "engine/mutex.h"
#include "engine/status.h"
#include "replication/standby_stream.h"
#include "wal/file.h"

namespace sundial::replication {

class NodeState final : public EpochPromise {
 public:
  NodeState(wal::FileSystem* fs, std::string dir) : fs_(fs), dir_(std::move(dir)) {}

  // Reads the file, or creates it for a directory that has none. FAILED_PRECONDITION when the
  // directory belongs to another cluster or node; INTERNAL for a damaged file.
  Status Load(const std::string& cluster, const std::string& node);

  uint64_t promised() const override;
  Status Promise(uint64_t epoch) override;  // no-op for an epoch not above the promise

  static constexpr const char* kFileName = "CLUSTER";

 private:
  Status WriteLocked(uint64_t epoch) REQUIRES(mu_);

  wal::FileSystem* const fs_;
  const std::string dir_;
  mutable Mutex mu_;
  std::string cluster_ GUARDED_BY(mu_);
  std::string node_ GUARDED_BY(mu_);
  uint64_t promised_ GUARDED_BY(mu_) = 0;
};

}  // namespace sundial::replication
