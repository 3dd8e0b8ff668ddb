// disk_fault_shim: an LD_PRELOAD library that makes the disk under one directory fail on demand,
// while the process runs, for the real sundiald binary (no test build, no failpoints).
//
// Environment (read once, at the first intercepted call):
//   SUNDIAL_FAULT_DIR      the directory whose files fail (absolute; files below it, any depth)
//   SUNDIAL_FAULT_CONTROL  the control file: the faults now armed, re-read whenever it changes
//                          (its inode, size or mtime: write a new file and rename it over)
//   SUNDIAL_FAULT_LOG      optional: one line "OP ERRNO PATH" appended per injected fault
//
// The control file holds one fault per line, "OP ERRNO [lose-unsynced] [match=TEXT]"; '#' starts
// a comment, an empty file arms nothing; with match=TEXT the fault hits only paths containing TEXT
// (e.g. match=.snap: snapshots, not segments):
//   sync EIO lose-unsynced  fdatasync, fsync and sync_file_range fail; with lose-unsynced the
//                           bytes written since the file's last good sync are first overwritten
//                           with zeroes, as when the kernel drops the dirty pages after a failed
//                           writeback (fsyncgate): whatever was acknowledged without a good sync
//                           is then really gone after a restart
//   write ENOSPC            write, pwrite, writev and pwritev fail (nothing is written)
//   prealloc ENOSPC         fallocate and posix_fallocate fail, and so does any write of zeroes
//                           that extends the file (sundiald preallocates by writing zeroes ahead
//                           of a segment's end: WritableFile::SetPreallocation)
//   open EROFS              open/openat/creat for writing or creating, rename, unlink and mkdir
//                           fail (reads still open)
// ERRNO is a name: EIO, ENOSPC, EROFS, EDQUOT, EACCES, EPERM, ENOMEM. Faults hit only files
// below SUNDIAL_FAULT_DIR; everything else passes through untouched.
//
// Under AddressSanitizer an LD_PRELOAD library comes before the ASan runtime, which ASan refuses
// unless ASAN_OPTIONS has verify_asan_link_order=0; the shim itself is built without sanitizers.
//
// Thread safety: one mutex around the rules and the per-descriptor table; the real calls are
// made outside it, except the zeroing of lost bytes, which must not race a sync of the same file.
#undef _FORTIFY_SOURCE  // the shim defines open() itself
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

namespace {

enum Op { kSync = 0, kWrite = 1, kPrealloc = 2, kOpen = 3, kOps = 4 };

struct Rule {
  int error = 0;  // 0: not armed
  bool lose_unsynced = false;
  char match[128] = {};  // empty: every path
};

// Whether `rule` is armed for `path`.
bool Hits(const Rule& rule, const char* path) {
  return rule.error != 0 && (rule.match[0] == '\0' || strstr(path, rule.match) != nullptr);
}

constexpr int kMaxFd = 65536;

// A descriptor of a file below the directory: its path, and the bytes written since its last
// good sync (for lose-unsynced).
struct Watched {
  bool watched = false;
  char path[512];
  off_t dirty_from = -1;  // -1: nothing unsynced
  off_t dirty_to = 0;
};

pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
bool g_initialised = false;  // GUARDED_BY(g_mu)
char g_dir[512];             // with a trailing '/'; empty: the shim is off
char g_control[512];
char g_log[512];
Rule g_rules[kOps];
struct stat g_control_stat;  // of the control file as last read
bool g_control_seen = false;
Watched* g_fds = nullptr;  // kMaxFd entries

template <typename F>
F Real(const char* name) {
  return reinterpret_cast<F>(dlsym(RTLD_NEXT, name));
}

using OpenFn = int (*)(const char*, int, ...);
using OpenatFn = int (*)(int, const char*, int, ...);
using CloseFn = int (*)(int);
using WriteFn = ssize_t (*)(int, const void*, size_t);
using PwriteFn = ssize_t (*)(int, const void*, size_t, off_t);
using WritevFn = ssize_t (*)(int, const struct iovec*, int);
using PwritevFn = ssize_t (*)(int, const struct iovec*, int, off_t);
using SyncFn = int (*)(int);
using SyncRangeFn = int (*)(int, off64_t, off64_t, unsigned int);
using FallocateFn = int (*)(int, int, off_t, off_t);
using PosixFallocateFn = int (*)(int, off_t, off_t);
using RenameFn = int (*)(const char*, const char*);
using PathFn = int (*)(const char*);
using MkdirFn = int (*)(const char*, mode_t);

int ErrnoByName(const char* name) {
  static const struct {
    const char* name;
    int value;
  } kNames[] = {{"EIO", EIO},       {"ENOSPC", ENOSPC}, {"EROFS", EROFS},  {"EDQUOT", EDQUOT},
                {"EACCES", EACCES}, {"EPERM", EPERM},   {"ENOMEM", ENOMEM}};
  for (const auto& n : kNames) {
    if (strcmp(n.name, name) == 0) return n.value;
  }
  return 0;
}

int OpByName(const char* name) {
  if (strcmp(name, "sync") == 0) return kSync;
  if (strcmp(name, "write") == 0) return kWrite;
  if (strcmp(name, "prealloc") == 0) return kPrealloc;
  if (strcmp(name, "open") == 0) return kOpen;
  return -1;
}

void CopyEnv(const char* name, char* out, size_t size) {
  const char* v = getenv(name);
  out[0] = '\0';
  if (v != nullptr && strlen(v) + 2 < size) strcpy(out, v);
}

// REQUIRES: g_mu held.
void Initialise() {
  if (g_initialised) return;
  g_initialised = true;
  CopyEnv("SUNDIAL_FAULT_DIR", g_dir, sizeof g_dir);
  CopyEnv("SUNDIAL_FAULT_CONTROL", g_control, sizeof g_control);
  CopyEnv("SUNDIAL_FAULT_LOG", g_log, sizeof g_log);
  if (g_dir[0] != '\0' && g_dir[strlen(g_dir) - 1] != '/') strcat(g_dir, "/");
  if (g_dir[0] != '\0') g_fds = static_cast<Watched*>(calloc(kMaxFd, sizeof(Watched)));
  if (g_fds == nullptr) g_dir[0] = '\0';
}

// Re-reads the control file if it changed. REQUIRES: g_mu held.
void Reload() {
  if (g_control[0] == '\0') return;
  struct stat st;
  if (stat(g_control, &st) != 0) {
    if (g_control_seen) {
      for (Rule& r : g_rules) r = Rule{};
      g_control_seen = false;
    }
    return;
  }
  if (g_control_seen && st.st_ino == g_control_stat.st_ino &&
      st.st_size == g_control_stat.st_size && st.st_mtim.tv_sec == g_control_stat.st_mtim.tv_sec &&
      st.st_mtim.tv_nsec == g_control_stat.st_mtim.tv_nsec) {
    return;
  }
  g_control_stat = st;
  g_control_seen = true;
  for (Rule& r : g_rules) r = Rule{};
  static OpenFn real_open = Real<OpenFn>("open");
  const int fd = real_open(g_control, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  char text[4096];
  const ssize_t n = read(fd, text, sizeof text - 1);
  static CloseFn real_close = Real<CloseFn>("close");
  real_close(fd);
  if (n <= 0) return;
  text[n] = '\0';
  char* save = nullptr;
  for (char* line = strtok_r(text, "\n", &save); line != nullptr;
       line = strtok_r(nullptr, "\n", &save)) {
    if (char* hash = strchr(line, '#')) *hash = '\0';
    char op[32], err[32], flags[2][160];
    const int fields = sscanf(line, "%31s %31s %159s %159s", op, err, flags[0], flags[1]);
    if (fields < 2) continue;
    const int o = OpByName(op);
    const int e = ErrnoByName(err);
    if (o < 0 || e == 0) {
      fprintf(stderr, "disk_fault_shim: ignoring control line \"%s\"\n", line);
      continue;
    }
    Rule& rule = g_rules[o];
    rule.error = e;
    for (int i = 0; i + 2 < fields; ++i) {
      if (strcmp(flags[i], "lose-unsynced") == 0) {
        rule.lose_unsynced = true;
      } else if (strncmp(flags[i], "match=", 6) == 0) {
        snprintf(rule.match, sizeof rule.match, "%s", flags[i] + 6);
      }
    }
  }
}

// REQUIRES: g_mu held.
void LogFault(const char* op, int error, const char* path) {
  if (g_log[0] == '\0') return;
  static OpenFn real_open = Real<OpenFn>("open");
  static WriteFn real_write = Real<WriteFn>("write");
  static CloseFn real_close = Real<CloseFn>("close");
  const int fd = real_open(g_log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;
  char line[700];
  const int n = snprintf(line, sizeof line, "%s %s %s\n", op, strerrorname_np(error), path);
  if (n > 0) (void)real_write(fd, line, static_cast<size_t>(n) < sizeof line ? n : sizeof line);
  real_close(fd);
}

bool Below(const char* path) {
  return g_dir[0] != '\0' && strncmp(path, g_dir, strlen(g_dir)) == 0;
}

// The absolute form of `path` (relative to the working directory) in `out`.
const char* Absolute(const char* path, char* out, size_t size) {
  if (path[0] == '/') return path;
  if (getcwd(out, size) == nullptr) return path;
  const size_t used = strlen(out);
  snprintf(out + used, size - used, "/%s", path);
  return out;
}

// The armed error of `op` for a path (0: none). Takes g_mu.
int PathFault(Op op, const char* path, const char* what) {
  pthread_mutex_lock(&g_mu);
  Initialise();
  int error = 0;
  if (g_dir[0] != '\0') {
    Reload();
    char buffer[512];
    const char* abs = Absolute(path, buffer, sizeof buffer);
    if (Hits(g_rules[op], abs) && Below(abs)) {
      error = g_rules[op].error;
      LogFault(what, error, abs);
    }
  }
  pthread_mutex_unlock(&g_mu);
  return error;
}

// After a successful open: watch the descriptor if its file is below the directory.
void TrackOpen(int fd) {
  if (fd < 0 || fd >= kMaxFd) return;
  pthread_mutex_lock(&g_mu);
  Initialise();
  if (g_dir[0] != '\0') {
    Watched& w = g_fds[fd];
    w = Watched{};
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    const ssize_t n = readlink(link, w.path, sizeof w.path - 1);
    if (n > 0) {
      w.path[n] = '\0';
      w.watched = Below(w.path);
    }
  }
  pthread_mutex_unlock(&g_mu);
}

bool AllZero(const void* data, size_t n) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != 0) return false;
  }
  return true;
}

// The error for a write of `n` bytes at `offset` (-1: the current position) to `fd`, or 0; when
// 0, records the range as unsynced. `zeroes`: the bytes are all zero (preallocation).
int WriteFault(int fd, off_t offset, size_t n, bool zeroes) {
  if (fd < 0 || fd >= kMaxFd) return 0;
  pthread_mutex_lock(&g_mu);
  Initialise();
  int error = 0;
  if (g_dir[0] != '\0' && g_fds[fd].watched) {
    Reload();
    Watched& w = g_fds[fd];
    const off_t at = offset >= 0 ? offset : lseek(fd, 0, SEEK_CUR);
    struct stat st;
    const bool extends = fstat(fd, &st) == 0 && at + static_cast<off_t>(n) > st.st_size;
    if (Hits(g_rules[kWrite], w.path)) {
      error = g_rules[kWrite].error;
      LogFault("write", error, w.path);
    } else if (Hits(g_rules[kPrealloc], w.path) && zeroes && extends) {
      error = g_rules[kPrealloc].error;
      LogFault("prealloc", error, w.path);
    } else if (!zeroes && at >= 0) {
      // Zeroes (preallocation) change nothing a reader sees if they are lost.
      if (w.dirty_from < 0 || at < w.dirty_from) w.dirty_from = at;
      if (at + static_cast<off_t>(n) > w.dirty_to) w.dirty_to = at + static_cast<off_t>(n);
    }
  }
  pthread_mutex_unlock(&g_mu);
  return error;
}

// The error for a sync of `fd`, or 0 (then the file's unsynced range is forgotten once the real
// sync succeeds: see SyncDone). With lose-unsynced, zeroes the unsynced range first.
int SyncFault(int fd) {
  if (fd < 0 || fd >= kMaxFd) return 0;
  pthread_mutex_lock(&g_mu);
  Initialise();
  int error = 0;
  if (g_dir[0] != '\0' && g_fds[fd].watched) {
    Reload();
    Watched& w = g_fds[fd];
    if (Hits(g_rules[kSync], w.path)) {
      error = g_rules[kSync].error;
      if (g_rules[kSync].lose_unsynced && w.dirty_from >= 0) {
        static PwriteFn real_pwrite = Real<PwriteFn>("pwrite");
        static const char kZeroes[4096] = {};
        for (off_t at = w.dirty_from; at < w.dirty_to;) {
          const size_t chunk = static_cast<size_t>(w.dirty_to - at < 4096 ? w.dirty_to - at : 4096);
          const ssize_t written = real_pwrite(fd, kZeroes, chunk, at);
          if (written <= 0) break;
          at += written;
        }
        static SyncFn real_fdatasync = Real<SyncFn>("fdatasync");
        (void)real_fdatasync(fd);  // the loss itself is durable
        w.dirty_from = -1;
        w.dirty_to = 0;
      }
      LogFault("sync", error, w.path);
    }
  }
  pthread_mutex_unlock(&g_mu);
  return error;
}

// A real sync of `fd` succeeded: what was written before it is durable.
void SyncDone(int fd) {
  if (fd < 0 || fd >= kMaxFd) return;
  pthread_mutex_lock(&g_mu);
  if (g_fds != nullptr) {
    g_fds[fd].dirty_from = -1;
    g_fds[fd].dirty_to = 0;
  }
  pthread_mutex_unlock(&g_mu);
}

int FallocateFault(int fd) {
  if (fd < 0 || fd >= kMaxFd) return 0;
  pthread_mutex_lock(&g_mu);
  Initialise();
  int error = 0;
  if (g_dir[0] != '\0' && g_fds[fd].watched) {
    Reload();
    if (Hits(g_rules[kPrealloc], g_fds[fd].path)) {
      error = g_rules[kPrealloc].error;
      LogFault("prealloc", error, g_fds[fd].path);
    }
  }
  pthread_mutex_unlock(&g_mu);
  return error;
}

bool OpensForWriting(int flags) { return (flags & (O_WRONLY | O_RDWR | O_CREAT | O_TRUNC)) != 0; }

size_t IovecBytes(const struct iovec* iov, int count, bool* zeroes) {
  size_t n = 0;
  *zeroes = true;
  for (int i = 0; i < count; ++i) {
    n += iov[i].iov_len;
    if (*zeroes && !AllZero(iov[i].iov_base, iov[i].iov_len)) *zeroes = false;
  }
  return n;
}

int Fail(int error) {
  errno = error;
  return -1;
}

}  // namespace

extern "C" {

int open(const char* path, int flags, ...) {
  static OpenFn real = Real<OpenFn>("open");
  mode_t mode = 0;
  if (flags & (O_CREAT | O_TMPFILE)) {
    va_list args;
    va_start(args, flags);
    mode = static_cast<mode_t>(va_arg(args, int));
    va_end(args);
  }
  if (OpensForWriting(flags)) {
    if (const int e = PathFault(kOpen, path, "open")) return Fail(e);
  }
  const int fd = real(path, flags, mode);
  TrackOpen(fd);
  return fd;
}

int open64(const char* path, int flags, ...) {
  mode_t mode = 0;
  if (flags & (O_CREAT | O_TMPFILE)) {
    va_list args;
    va_start(args, flags);
    mode = static_cast<mode_t>(va_arg(args, int));
    va_end(args);
  }
  return open(path, flags, mode);
}

int openat(int dirfd, const char* path, int flags, ...) {
  static OpenatFn real = Real<OpenatFn>("openat");
  mode_t mode = 0;
  if (flags & (O_CREAT | O_TMPFILE)) {
    va_list args;
    va_start(args, flags);
    mode = static_cast<mode_t>(va_arg(args, int));
    va_end(args);
  }
  // Paths relative to another directory are not resolved: sundiald uses absolute ones.
  if (OpensForWriting(flags) && (dirfd == AT_FDCWD || path[0] == '/')) {
    if (const int e = PathFault(kOpen, path, "open")) return Fail(e);
  }
  const int fd = real(dirfd, path, flags, mode);
  TrackOpen(fd);
  return fd;
}

int openat64(int dirfd, const char* path, int flags, ...) {
  mode_t mode = 0;
  if (flags & (O_CREAT | O_TMPFILE)) {
    va_list args;
    va_start(args, flags);
    mode = static_cast<mode_t>(va_arg(args, int));
    va_end(args);
  }
  return openat(dirfd, path, flags, mode);
}

int creat(const char* path, mode_t mode) { return open(path, O_WRONLY | O_CREAT | O_TRUNC, mode); }
int creat64(const char* path, mode_t mode) { return creat(path, mode); }

int close(int fd) {
  static CloseFn real = Real<CloseFn>("close");
  if (fd >= 0 && fd < kMaxFd) {
    pthread_mutex_lock(&g_mu);
    if (g_fds != nullptr) g_fds[fd].watched = false;
    pthread_mutex_unlock(&g_mu);
  }
  return real(fd);
}

ssize_t write(int fd, const void* data, size_t n) {
  static WriteFn real = Real<WriteFn>("write");
  if (const int e = WriteFault(fd, -1, n, n > 0 && AllZero(data, n))) return Fail(e);
  return real(fd, data, n);
}

ssize_t pwrite(int fd, const void* data, size_t n, off_t offset) {
  static PwriteFn real = Real<PwriteFn>("pwrite");
  if (const int e = WriteFault(fd, offset, n, n > 0 && AllZero(data, n))) return Fail(e);
  return real(fd, data, n, offset);
}

ssize_t pwrite64(int fd, const void* data, size_t n, off_t offset) {
  return pwrite(fd, data, n, offset);
}

ssize_t writev(int fd, const struct iovec* iov, int count) {
  static WritevFn real = Real<WritevFn>("writev");
  bool zeroes = false;
  const size_t n = IovecBytes(iov, count, &zeroes);
  if (const int e = WriteFault(fd, -1, n, n > 0 && zeroes)) return Fail(e);
  return real(fd, iov, count);
}

ssize_t pwritev(int fd, const struct iovec* iov, int count, off_t offset) {
  static PwritevFn real = Real<PwritevFn>("pwritev");
  bool zeroes = false;
  const size_t n = IovecBytes(iov, count, &zeroes);
  if (const int e = WriteFault(fd, offset, n, n > 0 && zeroes)) return Fail(e);
  return real(fd, iov, count, offset);
}

int fdatasync(int fd) {
  static SyncFn real = Real<SyncFn>("fdatasync");
  if (const int e = SyncFault(fd)) return Fail(e);
  const int r = real(fd);
  if (r == 0) SyncDone(fd);
  return r;
}

int fsync(int fd) {
  static SyncFn real = Real<SyncFn>("fsync");
  if (const int e = SyncFault(fd)) return Fail(e);
  const int r = real(fd);
  if (r == 0) SyncDone(fd);
  return r;
}

int sync_file_range(int fd, off64_t offset, off64_t n, unsigned int flags) {
  static SyncRangeFn real = Real<SyncRangeFn>("sync_file_range");
  if (const int e = SyncFault(fd)) return Fail(e);
  return real(fd, offset, n, flags);
}

int fallocate(int fd, int mode, off_t offset, off_t n) {
  static FallocateFn real = Real<FallocateFn>("fallocate");
  if (const int e = FallocateFault(fd)) return Fail(e);
  return real(fd, mode, offset, n);
}

int fallocate64(int fd, int mode, off_t offset, off_t n) { return fallocate(fd, mode, offset, n); }

// posix_fallocate returns the error instead of setting errno.
int posix_fallocate(int fd, off_t offset, off_t n) {
  static PosixFallocateFn real = Real<PosixFallocateFn>("posix_fallocate");
  if (const int e = FallocateFault(fd)) return e;
  return real(fd, offset, n);
}

int posix_fallocate64(int fd, off_t offset, off_t n) { return posix_fallocate(fd, offset, n); }

int rename(const char* from, const char* to) {
  static RenameFn real = Real<RenameFn>("rename");
  if (const int e = PathFault(kOpen, to, "rename")) return Fail(e);
  return real(from, to);
}

int unlink(const char* path) {
  static PathFn real = Real<PathFn>("unlink");
  if (const int e = PathFault(kOpen, path, "unlink")) return Fail(e);
  return real(path);
}

int mkdir(const char* path, mode_t mode) {
  static MkdirFn real = Real<MkdirFn>("mkdir");
  if (const int e = PathFault(kOpen, path, "mkdir")) return Fail(e);
  return real(path, mode);
}

}  // extern "C"
