// Reading a torture's inventory: every message of some queues, as the `inventory` lines of the
// history (tests/torture/history.h), from any node that serves reads (a standby too).
//
// Messages are browsed state by state, waiting first and pending before the terminal states:
// timers that run while it is read (a lease that expires, a retry delay that ends) move
// messages to pending, which is read after the states they leave, so none is missed (a
// dependent leaves waiting only by a request's completion or cancel). A completed message's result
// is read with one Wait (0 ms) per page.
//
// Thread safety: functions only; the client is used by one thread.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "client/client.h"

namespace sundial::torture {

// Appends to *out an `inventory-queue` line per queue and an `inventory` line per message (at
// time `t`, numbered `round`), without the `inventory-end`. A queue that does not exist reads as
// empty. The error of a request that failed, if one did.
std::optional<client::Error> ReadInventory(client::Client& client,
                                           const std::vector<std::string>& queues, int64_t t,
                                           int round, std::string* out);

}  // namespace sundial::torture
