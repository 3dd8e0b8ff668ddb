// Failpoints: named places where a test build of sundiald kills itself, so that the crash
// torture (tests/torture/, docs/testing.md "Torture") can stop the server exactly between two
// steps of a write, a sync, a checkpoint or a segment rotation.
//
// Compiled in only where SUNDIAL_FAILPOINTS is defined: the sundiald-failpoints executable
// (tests/torture/CMakeLists.txt) compiles the files that hold failpoints again with it. In the
// real sundiald, and in every library, the macros are empty and `SUNDIAL_BUG(name)` is the
// constant false: no code, no environment lookup, nothing to switch on by accident.
//
// In the test build:
//   SUNDIAL_FAILPOINT=name      the first time `name` is reached the process SIGKILLs itself;
//   SUNDIAL_FAILPOINT=name:N    the N-th time (N >= 1).
//   Before dying it writes "failpoint NAME reached (hit N): SIGKILL" to stderr.
//   SUNDIAL_BUG=name            turns on a planted bug (a torture's proof that its checker
//                               can fail): `ack_before_sync` (the crash torture's), or
//                               `no_fencing` (the failover torture's: a primary ignores its
//                               leadership's deadline, and a synchronous standby that left no
//                               longer holds its replies back; server/replica_node.cc,
//                               server/replication_hub.cc).
// Names (docs/testing.md, "Failpoints", says where each one is):
//   wal.before_write, wal.after_write_before_sync, wal.after_sync_before_reply,
//   checkpoint.before_rename, checkpoint.after_rename, wal.mid_rotation.
//
// Thread safety: Reach may be called from any thread (the count is atomic).
#pragma once

namespace sundial::failpoint {

// Counts a visit of `name`; SIGKILLs the process when it is the armed one and the count is due.
void Reach(const char* name);
// True when SUNDIAL_BUG names `name`.
bool BugEnabled(const char* name);

}  // namespace sundial::failpoint

#ifdef SUNDIAL_FAILPOINTS
#define SUNDIAL_FAILPOINT(name) ::sundial::failpoint::Reach(name)
#define SUNDIAL_BUG(name) ::sundial::failpoint::BugEnabled(name)
#else
#define SUNDIAL_FAILPOINT(name) \
  do {                          \
  } while (false)
#define SUNDIAL_BUG(name) false
#endif
