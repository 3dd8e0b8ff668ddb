// The replication port's listener and what its sessions need from the node (server/
// replication_port.cc; docs/replication.md, "The replication protocol"). Asio-free.
#pragma once

#include <chrono>
#include <memory>
#include <optional>

#include "replication/primary_stream.h"
#include "server/replication_hub.h"

namespace sundial::server {

class Core;
class Listener;
class Loop;

class ReplicationPort {
 public:
  virtual ~ReplicationPort() = default;
  // What a new standby's stream needs while this node is the primary; nullopt when it is not
  // (the standby is refused NOT_PRIMARY).
  virtual std::optional<replication::PrimaryEnv> StreamEnv() = 0;
  virtual ReplicationHub* hub() = 0;
  // A standby silent this long is dropped (--replication-timeout-ms).
  virtual std::chrono::milliseconds timeout() const = 0;
};

// Accepts standbys on loop 0 (server/acceptor.h), each session on its own loop.
std::unique_ptr<Listener> NewReplicationListener(Loop* loop, Core* core, ReplicationPort* port);

}  // namespace sundial::server
