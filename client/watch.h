// Watch: the `subscribe` operation (docs/protocol.md, "Subscriptions"), which the server offers on
// WebSocket only (`/ws` on its HTTP port, default 7401).
//
// Watch connects, upgrades to WebSocket (with `Authorization: Bearer TOKEN` when a token is
// given), sends one text frame with the Subscribe request in the protocol's JSON form
//   {"request_id":1,"op_type":"Subscribe","op":{"queue":"Q"}}
// and then hands every event (MessageEvent, StatsTick, SubscriptionClosed) to the handler, in
// order. Text frames from the server are read as JSON (protocol/json.h), binary frames as
// FlatBuffers; either way the ServerMessage is verified before use.
//
// It returns:
//   - ok, when the handler returned false (the caller stopped watching);
//   - the server's Error (kServer) when it refused the upgrade (401/403: UNAUTHENTICATED) or
//     the Subscribe; UNAVAILABLE (kServer) after a SubscriptionClosed event, which the handler
//     has seen, with the server's reason;
//   - UNAVAILABLE (kConnection) when the server cannot be reached, the upgrade or the
//     Subscribe answer does not come within timeout_ms, or the connection ends;
//   - INTERNAL (kConnection) for a frame that cannot be read as a ServerMessage.
//
// Following a cluster (WatchOptions::cluster, two or more binary TCP addresses): Watch finds the
// primary as Client does (client.h), subscribes on the primary's HTTP port (its member's
// http_addr in the Cluster answer; `http` is not used), and when the connection ends or the
// server closes the subscription (UNAVAILABLE), it finds the primary again and subscribes
// again, with the backoff of `retry`, until retry.budget_ms have passed without a subscription
// standing; then it returns the last error. Events of the gap between two subscriptions are
// not replayed, and the handler is not told of the gap: a watcher that needs every change
// reads the state again (get, browse, count). Other errors end it at once.
//
// Thread safety: blocks the calling thread; the handler runs on it. Boost.Beast stays inside
// client/watch.cc.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "client/client.h"

namespace sundial::client {

struct WatchOptions {
  Address http{"127.0.0.1", kDefaultHttpPort};  // the server's HTTP/WebSocket port
  std::string token;                            // empty: no Authorization header
  std::string queue = "*";                      // a queue name, or "*" for every queue
  Pairs filter;                                 // events of matching messages only
  int timeout_ms = kDefaultTimeoutMs;           // connect, upgrade, Subscribe answer, idle
  bool tls = false;                             // wss: verified as ConnectOptions (client.h)
  std::string ca_file;                          // PEM CAs; empty: the system's
  std::vector<Address> cluster;                 // 2+: follow this cluster's primary (above)
  RetryPolicy retry;                            // following: re-subscription's backoff
};

// Called with each event; returns false to stop watching.
using EventHandler = std::function<bool(const protocol::EventMessage& event)>;

Result<void> Watch(const WatchOptions& options, const EventHandler& on_event);

}  // namespace sundial::client
