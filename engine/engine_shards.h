// Engine internals shared by its .cc files (engine.cc, flows.cc): a shard and the lock of every
// shard (engine.h, "Structure" and "Dependencies"). Not for use outside engine/.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <string_view>

#include <boost/unordered/unordered_flat_map.hpp>

#include "engine/engine.h"
#include "engine/mutex.h"
#include "engine/queue.h"

namespace sundial {

struct Engine::Shard {
  explicit Shard(uint64_t seed, size_t i) : rng(seed), index(i) {}
  mutable Mutex mu;
  boost::unordered_flat_map<std::string, std::unique_ptr<Queue>, StringHash, std::equal_to<>> queues
      GUARDED_BY(mu);
  Random rng GUARDED_BY(mu);
  const size_t index;
  // Accounted bytes of this shard's messages: written under mu, read by anyone.
  alignas(64) std::atomic<uint64_t> bytes{0};

  Queue* Find(std::string_view name) const REQUIRES(mu) {
    auto it = queues.find(name);
    return it == queues.end() ? nullptr : it->second.get();
  }
};

// Every shard's lock in index order, then deps_mu_, then batches_mu_ (engine.h, "lock order").
class SCOPED_CAPABILITY Engine::AllShardsLock {
 public:
  // Not analysed inside: the shards are a run-time list.
  explicit AllShardsLock(const Engine* engine)
      ACQUIRE(engine->deps_mu_, engine->batches_mu_) NO_THREAD_SAFETY_ANALYSIS : engine_(engine) {
    Lock(engine_);
  }
  ~AllShardsLock() RELEASE() NO_THREAD_SAFETY_ANALYSIS { Unlock(engine_); }

  // The lock order itself, for Engine::Freeze, which takes more locks around it.
  static void Lock(const Engine* engine) NO_THREAD_SAFETY_ANALYSIS {
    for (const auto& shard : engine->shards_) shard->mu.Lock();
    engine->deps_mu_.Lock();
    engine->batches_mu_.Lock();
  }
  static void Unlock(const Engine* engine) NO_THREAD_SAFETY_ANALYSIS {
    engine->batches_mu_.Unlock();
    engine->deps_mu_.Unlock();
    for (auto it = engine->shards_.rbegin(); it != engine->shards_.rend(); ++it) {
      (*it)->mu.Unlock();
    }
  }
  AllShardsLock(const AllShardsLock&) = delete;
  AllShardsLock& operator=(const AllShardsLock&) = delete;

 private:
  const Engine* engine_;
};

}  // namespace sundial
