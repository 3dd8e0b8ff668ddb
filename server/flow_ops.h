// enqueue_flow in the operation table (server/dispatch.cc; the rules: docs/semantics.md,
// "Flows"): decodes the forest, makes one Engine::EnqueueFlow call and encodes the answer, one
// FlowNodeResult per node in pre-order. A kMutation row: its reply waits for the flow's record.
#pragma once

#include "engine/status.h"
#include "engine/types.h"
#include "protocol/sundial_generated.h"
#include "server/dispatch.h"

namespace sundial::server {

// An enqueue item from the wire (defined in dispatch.cc, shared with enqueue).
// INVALID_ARGUMENT for an on_dependency_failure outside the schema's values.
Status ItemFromWire(const protocol::EnqueueItem* in, EnqueueItem* item);

void RunEnqueueFlow(const protocol::Request& request, OpContext& ctx, Reply& r);

}  // namespace sundial::server
