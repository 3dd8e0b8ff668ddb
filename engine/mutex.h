// Mutex, MutexLock, ReleasableMutexLock and CondVar: std::mutex and std::condition_variable with
// the thread-safety annotations of engine/thread_annotations.h, so that clang's -Wthread-safety
// checks every GUARDED_BY and REQUIRES (libstdc++'s std::mutex carries no attributes). The shapes
// are Abseil's absl::Mutex / absl::MutexLock and LevelDB's port::Mutex / port::CondVar.
//
//   Mutex mu_;
//   bool stop_ GUARDED_BY(mu_) = false;
//   CondVar changed_;
//
//   void Stop() {
//     MutexLock lock(&mu_);
//     stop_ = true;
//     changed_.SignalAll();
//   }
//   void AwaitStop() {
//     MutexLock lock(&mu_);
//     while (!stop_) changed_.Wait(&mu_);  // the condition reads stop_ under mu_: checked
//   }
//
// Cost: none over the standard types. Every method is inline and forwards to std::mutex or
// std::condition_variable (a CondVar waits on the Mutex's own std::mutex, adopted for the
// wait), so the engine's shard locks and the log's group-commit lock cost what they did.
// A function that drops a held lock for a while and takes it back calls mu.Unlock() and
// mu.Lock() inside the MutexLock's scope (LevelDB's DBImpl does the same); the analysis checks
// that nothing guarded is touched in between.
// AssertHeld checks nothing at run time (std::mutex cannot tell who holds it): it tells the
// analysis a lock is held where the analysis cannot see it being taken.
//
// Thread safety: a Mutex is what makes other state thread-safe; a CondVar is used with one
// Mutex at a time. Neither is copyable or movable.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "engine/thread_annotations.h"

namespace sundial {

class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  [[nodiscard]] bool TryLock() TRY_ACQUIRE(true) { return mu_.try_lock(); }
  // Tells the analysis that the caller holds this mutex; checks nothing (see the file comment).
  void AssertHeld() const ASSERT_CAPABILITY(this) {}

  // The standard's Lockable names, for std::unique_lock and std::scoped_lock where a guard must
  // move (the analysis does not follow those guards: prefer MutexLock).
  void lock() ACQUIRE() { mu_.lock(); }
  void unlock() RELEASE() { mu_.unlock(); }
  [[nodiscard]] bool try_lock() TRY_ACQUIRE(true) { return mu_.try_lock(); }

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds a Mutex from construction to destruction (std::lock_guard).
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() RELEASE() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

// A MutexLock that may give the Mutex back before the end of its scope (Release), for a path
// that leaves the lock to call out (Abseil's absl::ReleasableMutexLock). The lock is not taken
// again.
class SCOPED_CAPABILITY ReleasableMutexLock {
 public:
  explicit ReleasableMutexLock(Mutex* mu) ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  ~ReleasableMutexLock() RELEASE() {
    if (mu_ != nullptr) mu_->Unlock();
  }
  ReleasableMutexLock(const ReleasableMutexLock&) = delete;
  ReleasableMutexLock& operator=(const ReleasableMutexLock&) = delete;

  void Release() RELEASE() {
    mu_->Unlock();
    mu_ = nullptr;
  }

 private:
  Mutex* mu_;
};

// A condition variable for a Mutex (std::condition_variable). The waits take the Mutex the
// caller holds; it is released while waiting and held again on return. Wakeups may be spurious:
// wait in a loop on the condition, as the example above does.
class CondVar {
 public:
  CondVar() = default;
  CondVar(const CondVar&) = delete;
  CondVar& operator=(const CondVar&) = delete;

  void Wait(Mutex* mu) REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();
  }
  // Waits until signalled or until `deadline`; false when the deadline passed.
  template <typename Clock, typename Duration>
  bool WaitUntil(Mutex* mu, const std::chrono::time_point<Clock, Duration>& deadline) REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    const bool woken = cv_.wait_until(lock, deadline) == std::cv_status::no_timeout;
    lock.release();
    return woken;
  }

  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace sundial
