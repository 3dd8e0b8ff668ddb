// Thread-safety annotations: locking rules written as attributes that clang's -Wthread-safety
// checks at compile time (Abseil's thread_annotations.h, LevelDB's port/thread_annotations.h).
//
//   Mutex mu_;
//   int count_ GUARDED_BY(mu_);            // read or written only with mu_ held
//   Item* head_ PT_GUARDED_BY(mu_);        // the pointer is free; what it points to is guarded
//   void Flush() REQUIRES(mu_);            // the caller holds mu_
//   void Stop() EXCLUDES(mu_);             // the caller does not hold mu_ (it takes it)
//
// Under clang they expand to the attributes; under any other compiler (GCC builds the product)
// to nothing, so they cost nothing anywhere. The check is the `thread_safety` target
// (cmake/thread_safety.cmake, docs/testing.md "Thread-safety analysis"): every library source
// compiled by clang with -fsyntax-only -Wthread-safety -Werror, run by `make test`.
//
// The capabilities are sundial::Mutex and its guards (engine/mutex.h): libstdc++'s std::mutex
// carries no attributes, so a member guarded by one is not checked.
//
// NO_THREAD_SAFETY_ANALYSIS turns the check off for one function; each use says why (a lock
// taken in a loop over shards, a lock handed to a callee), and it is the last resort.
//
// This file includes nothing: every layer may include it.
#pragma once

#if defined(__clang__)
#define SUNDIAL_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define SUNDIAL_THREAD_ANNOTATION(x)
#endif

// A class whose objects are capabilities (a mutex). `x` names the kind in messages.
#define CAPABILITY(x) SUNDIAL_THREAD_ANNOTATION(capability(x))
// A class that holds a capability for its lifetime (RAII: MutexLock).
#define SCOPED_CAPABILITY SUNDIAL_THREAD_ANNOTATION(scoped_lockable)

// A member read or written only with the capability held.
#define GUARDED_BY(x) SUNDIAL_THREAD_ANNOTATION(guarded_by(x))
// A pointer (or smart pointer) whose target is read or written only with the capability held.
#define PT_GUARDED_BY(x) SUNDIAL_THREAD_ANNOTATION(pt_guarded_by(x))

// Lock order: this capability is taken after (before) the listed ones.
#define ACQUIRED_AFTER(...) SUNDIAL_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))
#define ACQUIRED_BEFORE(...) SUNDIAL_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))

// The caller must hold the capabilities (exclusively; shared for REQUIRES_SHARED).
#define REQUIRES(...) SUNDIAL_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define REQUIRES_SHARED(...) SUNDIAL_THREAD_ANNOTATION(requires_shared_capability(__VA_ARGS__))
// The caller must not hold the capabilities (the function takes them).
#define EXCLUDES(...) SUNDIAL_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))

// The function takes (gives back) the capabilities; with no argument, `this` or, on a
// SCOPED_CAPABILITY's destructor, what the guard holds.
#define ACQUIRE(...) SUNDIAL_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define ACQUIRE_SHARED(...) SUNDIAL_THREAD_ANNOTATION(acquire_shared_capability(__VA_ARGS__))
#define RELEASE(...) SUNDIAL_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define RELEASE_SHARED(...) SUNDIAL_THREAD_ANNOTATION(release_shared_capability(__VA_ARGS__))
// The function takes the capability when it returns `result` (a try-lock).
#define TRY_ACQUIRE(...) SUNDIAL_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
// The function returns only if the capability is held (AssertHeld).
#define ASSERT_CAPABILITY(x) SUNDIAL_THREAD_ANNOTATION(assert_capability(x))
// The function returns a reference to the capability (an accessor of a mutex).
#define RETURN_CAPABILITY(x) SUNDIAL_THREAD_ANNOTATION(lock_returned(x))

// Turns the analysis off inside one function. Say why beside it.
#define NO_THREAD_SAFETY_ANALYSIS SUNDIAL_THREAD_ANNOTATION(no_thread_safety_analysis)
