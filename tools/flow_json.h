// Flow JSON: the forest of `sundial enqueue-flow --file` (docs/cli.md, "enqueue-flow") read
// into client::FlowNode values. A file holds one tree (an object) or a list of trees; a node is
//   {"queue": "q", "id": "...", "payload": "text", "priority": 0, "metadata": {"k": "v"},
//    "delay_ms": 0, "visible_at": 0, "max_attempts": 3, "depends_on": ["q/id"],
//    "on_dependency_failure": "cancel"|"release"|"error", "batch": "b", "children": [node...]}
// where only "queue" is required. Unknown keys, wrong types and trees deeper than 32 levels are
// errors (the server checks the rest: docs/semantics.md, "Flows").
//
// Thread safety: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "client/requests.h"

namespace sundial::tools {

// False with *error (naming the node by its path, e.g. "[0].children[1]") when `text` is not a
// valid flow.
bool FlowFromJson(std::string_view text, std::vector<client::FlowNode>* roots, std::string* error);

}  // namespace sundial::tools
