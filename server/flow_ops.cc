#include "server/flow_ops.h"

#include <string>
#include <utility>
#include <vector>

#include "engine/flows.h"
#include "server/schedule_ops.h"  // the wire helpers (Str)

namespace sundial::server {

namespace fb = flatbuffers;
namespace p = protocol;

namespace {

using WireNodes = fb::Vector<fb::Offset<p::FlowNode>>;

// The nodes of `in` as the engine's (children decoded the same way). The engine checks the
// limits; this stops at them too, so that a forest past them costs no more than them to decode.
Status NodesFromWire(const WireNodes* in, size_t depth, size_t* count, std::vector<FlowNode>* out) {
  if (in == nullptr) return Status::Ok();
  if (depth > kMaxFlowDepth) return InvalidArgument("nodes: a flow is at most 32 levels deep");
  out->reserve(in->size());
  for (const p::FlowNode* node : *in) {
    if (++*count > kMaxFlowNodes) return InvalidArgument("nodes: a flow has 1-1000 nodes");
    FlowNode& n = out->emplace_back();
    n.queue = std::string(Str(node->queue()));
    if (const p::EnqueueItem* item = node->item()) {
      if (Status s = ItemFromWire(item, &n.item); !s.ok()) return s;
    }
    if (Status s = NodesFromWire(node->children(), depth + 1, count, &n.children); !s.ok()) {
      return s;
    }
  }
  return Status::Ok();
}

}  // namespace

void RunEnqueueFlow(const p::Request& request, OpContext& ctx, Reply& r) {
  const auto* op = request.op_as_EnqueueFlow();
  std::vector<FlowNode> roots;
  size_t count = 0;
  if (Status s = NodesFromWire(op->nodes(), 1, &count, &roots); !s.ok()) return r.Error(s);
  Result<std::vector<FlowNodeResult>> results = ctx.engine->EnqueueFlow(std::move(roots));
  if (!results.ok()) return r.Error(results.status());
  auto& b = r.b();
  std::vector<fb::Offset<p::FlowNodeResult>> out;
  out.reserve(results->size());
  for (const FlowNodeResult& n : *results) {
    if (!n.duplicate) ++ctx.messages;
    out.push_back(p::CreateFlowNodeResult(b, b.CreateString(n.queue), b.CreateString(n.id),
                                          n.version, n.duplicate));
  }
  r.Ok(p::Result::FlowResult, p::CreateFlowResult(b, b.CreateVector(out)));
}

}  // namespace sundial::server
