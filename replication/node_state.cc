#include "replication/node_state.h"

#include <boost/json.hpp>

namespace sundial::replication {

namespace json = boost::json;

Status NodeState::Load(const std::string& cluster, const std::string& node) {
  MutexLock lock(&mu_);
  const std::string path = wal::JoinPath(dir_, kFileName);
  if (!fs_->FileExists(path)) {
    cluster_ = cluster;
    node_ = node;
    promised_ = 0;
    return WriteLocked(0);
  }
  auto text = wal::ReadFileToString(fs_, path);
  if (!text.ok()) return text.status();
  boost::system::error_code ec;
  json::value v = json::parse(*text, ec);
  const json::object* o = ec ? nullptr : v.if_object();
  const json::value* c = o ? o->if_contains("cluster") : nullptr;
  const json::value* n = o ? o->if_contains("node") : nullptr;
  const json::value* e = o ? o->if_contains("promised_epoch") : nullptr;
  if (c == nullptr || !c->is_string() || n == nullptr || !n->is_string() || e == nullptr ||
      !(e->is_uint64() || e->is_int64())) {
    return Status(Code::kInternal, path + ": damaged (expected {cluster, node, promised_epoch})");
  }
  if (c->as_string() != cluster || n->as_string() != node) {
    return Status(Code::kFailedPrecondition, path + ": this data directory belongs to node '" +
                                                 std::string(n->as_string()) + "' of cluster '" +
                                                 std::string(c->as_string()) + "', not node '" +
                                                 node + "' of cluster '" + cluster + "'");
  }
  cluster_ = cluster;
  node_ = node;
  promised_ = e->is_uint64() ? e->as_uint64() : static_cast<uint64_t>(e->as_int64());
  return Status::Ok();
}

uint64_t NodeState::promised() const {
  MutexLock lock(&mu_);
  return promised_;
}

Status NodeState::Promise(uint64_t epoch) {
  MutexLock lock(&mu_);
  if (epoch <= promised_) return Status::Ok();
  if (Status s = WriteLocked(epoch); !s.ok()) return s;
  promised_ = epoch;
  return Status::Ok();
}

Status NodeState::WriteLocked(uint64_t epoch) {
  json::object o{{"cluster", cluster_}, {"node", node_}, {"promised_epoch", epoch}};
  const std::string path = wal::JoinPath(dir_, kFileName);
  const std::string tmp = path + ".tmp";
  if (Status s = wal::WriteStringToFile(fs_, tmp, json::serialize(o) + "\n"); !s.ok()) return s;
  if (Status s = fs_->RenameFile(tmp, path); !s.ok()) return s;
  return fs_->SyncDir(dir_);
}

}  // namespace sundial::replication
