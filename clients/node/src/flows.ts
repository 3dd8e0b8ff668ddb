// enqueueFlow (docs/semantics.md, "Flows"): a forest of messages across queues in one request,
// each node's message waiting until its children have completed; all or none, one log record.
// The rules of the Python client's enqueue_flow, checked before anything is sent.

import * as flatbuffers from "flatbuffers";

import { Call, CheckedItem, ITEM_KEYS, buildItem, call, checkItem, checkKeys, createString, expect, offsetVector, str, text } from "./codec";
import { invalidArgument } from "./errors";
import * as P from "./generated";
import { FlowNodeResult } from "./records";

export const MAX_FLOW_NODES = 1000;
export const MAX_FLOW_DEPTH = 32;

interface CheckedNode {
  queue: string;
  item: CheckedItem;
  children: CheckedNode[];
}

function checkNodes(value: unknown, path: string, depth: number, count: { n: number }): CheckedNode[] {
  if (!Array.isArray(value)) throw invalidArgument(`${path || "flow"}: must be a node or an array of nodes`);
  if (depth > MAX_FLOW_DEPTH) throw invalidArgument(`${path}: a flow has at most ${MAX_FLOW_DEPTH} levels`);
  return value.map((node, k) => {
    const name = `${path}[${k}]`;
    const o = checkKeys(name, node, ["queue", "children", ...ITEM_KEYS]);
    if (++count.n > MAX_FLOW_NODES) throw invalidArgument(`nodes: a flow has 1-${MAX_FLOW_NODES} nodes`);
    const { queue, children, ...item } = o;
    return {
      queue: str(`${name}.queue`, queue),
      item: checkItem(item),
      children: children == null ? [] : checkNodes(children, `${name}.children`, depth + 1, count),
    };
  });
}

function buildNodes(b: flatbuffers.Builder, nodes: CheckedNode[]): flatbuffers.Offset {
  return offsetVector(b, nodes.map((node) => {
    const children = node.children.length ? buildNodes(b, node.children) : 0;
    const item = buildItem(b, node.item);
    const q = createString(b, node.queue);
    P.FlowNode.startFlowNode(b);
    P.FlowNode.addQueue(b, q);
    P.FlowNode.addItem(b, item);
    if (children) P.FlowNode.addChildren(b, children);
    return P.FlowNode.endFlowNode(b);
  }));
}

function allIds(nodes: CheckedNode[]): boolean {
  return nodes.every((n) => !!n.item.id && allIds(n.children));
}

/** One tree (an object) or a list of trees; one FlowNodeResult per node, in pre-order. */
export function enqueueFlow(trees: unknown): Call<FlowNodeResult[]> {
  const list = Array.isArray(trees) ? trees : [trees];
  const nodes = checkNodes(list, "nodes", 1, { n: 0 });
  if (nodes.length === 0) throw invalidArgument(`nodes: a flow has 1-${MAX_FLOW_NODES} nodes`);
  return call("enqueueFlow", P.Operation.EnqueueFlow, true, (b) => {
    const vector = buildNodes(b, nodes);
    P.EnqueueFlow.startEnqueueFlow(b);
    P.EnqueueFlow.addNodes(b, vector);
    return P.EnqueueFlow.endEnqueueFlow(b);
  }, (response) => {
    const r = expect(response, P.Result.FlowResult, new P.FlowResult(), "enqueueFlow");
    const out: FlowNodeResult[] = [];
    for (let i = 0, n = r.nodesLength(); i < n; i++) {
      const node = r.nodes(i)!;
      out.push({ queue: text(node.queue()), id: text(node.id()), version: Number(node.version()), duplicate: node.duplicate() });
    }
    return out;
    // Sent again after an unknown outcome only when every node has an id: a resend is then a duplicate.
  }, { resend: allIds(nodes) });
}
