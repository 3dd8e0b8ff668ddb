// Operator messages (issue 14, item 6): a start refused by damage in the log says what it found,
// where (file and offset) and the exact command to repair, and never says REPAIRED unless it
// repaired (it used to log "REPAIRED ... dropped 0 bytes" and then "cannot start"); the printed
// command works and keeps everything before the damage. And file errors keep their errno: EIO
// and EROFS read differently, through the POSIX file system under the shim.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "client/client.h"
#include "tests/e2e/net_helpers.h"
#include "tests/e2e/server_process.h"
#include "tests/faults/fault_test_util.h"
#include "wal/file.h"
#include "wal/log_format.h"
#include "wal/log_reader.h"

namespace sundial::faults {
namespace {

namespace p = protocol;
using client::Client;
using e2e::ServerProcess;
using e2e::TempDir;

// Offsets of the records of a log segment.
std::vector<uint64_t> RecordOffsets(const std::string& path) {
  auto fs = wal::NewPosixFileSystem();
  auto file = fs->NewSequentialFile(path);
  EXPECT_TRUE(file.ok());
  wal::LogReader reader(std::move(*file), path, nullptr, {});
  std::vector<uint64_t> offsets;
  wal::LogReader::Record record;
  while (reader.ReadRecord(&record)) offsets.push_back(record.offset);
  return offsets;
}

std::vector<std::string> Segments(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (wal::ParseSegmentFileName(name)) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

// Runs `command` with /bin/sh, stderr to `log`, until `ready_file` appears (true) or it exits.
pid_t StartShellCommand(const std::string& command, const std::string& log) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) ::dup2(fd, 2);
    ::execl("/bin/sh", "sh", "-c", ("exec " + command).c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

TEST(RefusedStart, AFlippedByteMidLogNamesFileOffsetAndTheRepairCommandThatWorks) {
  TempDir dir;
  const std::string data = dir.path() + "/data";
  // Small segments: the log has several, and the damage is in one that is not the last.
  ServerProcess server(data, {"--segment-bytes", "65536"});
  ASSERT_TRUE(server.Start()) << server.log();
  constexpr int kMessages = 400;
  {
    auto c = Client::Connect({"127.0.0.1", server.port()});
    ASSERT_TRUE(c.ok());
    for (int i = 0; i < kMessages; ++i) {
      client::EnqueueItem item;
      item.id = "m-" + std::to_string(i);
      item.payload = std::string(500, 'x');
      auto r = (*c)->Enqueue("q", {item});
      ASSERT_TRUE(r.ok() && r->result<p::EnqueueResults>()->items()->Get(0)->error() == nullptr);
    }
  }
  ASSERT_EQ(server.Terminate(), 0) << server.log();

  const auto segments = Segments(data);
  ASSERT_GE(segments.size(), 3u);
  const std::string damaged = segments[segments.size() / 2];
  const std::string damaged_path = data + "/" + damaged;
  const auto offsets = RecordOffsets(damaged_path);
  ASSERT_GE(offsets.size(), 10u);
  const uint64_t offset = offsets[offsets.size() / 2];
  uint64_t records_before = offsets.size() / 2;  // in the damaged segment
  for (const std::string& s : segments) {
    if (s == damaged) break;
    records_before += RecordOffsets(data + "/" + s).size();
  }
  {
    std::fstream f(damaged_path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(offset + wal::kRecordHeaderBytes + 3));
    char c = 0;
    f.get(c);
    f.seekp(static_cast<std::streamoff>(offset + wal::kRecordHeaderBytes + 3));
    f.put(static_cast<char>(c ^ 0x40));
    ASSERT_TRUE(f.good());
  }

  // The start is refused, with what, where and how to repair; nothing called REPAIRED.
  const size_t log_before = server.log().size();
  ASSERT_FALSE(server.Start());
  const std::string log = server.log().substr(log_before);
  std::printf("the refused start:\n%s", log.c_str());
  EXPECT_EQ(log.find("REPAIRED"), std::string::npos) << log;
  EXPECT_NE(log.find("cannot start"), std::string::npos) << log;
  EXPECT_NE(log.find(damaged + " at offset " + std::to_string(offset)), std::string::npos) << log;
  EXPECT_NE(log.find("checksum"), std::string::npos) << log;
  EXPECT_NE(log.find("nothing was changed"), std::string::npos) << log;
  EXPECT_NE(log.find("sundial-wal verify " + data), std::string::npos) << log;
  const auto repair_lines = LinesWith(log, "to repair");
  ASSERT_EQ(repair_lines.size(), 1u) << log;
  const std::string& line = repair_lines[0];
  const size_t cmd_at = line.find(SUNDIALD_BIN);
  ASSERT_NE(cmd_at, std::string::npos) << "the real binary: " << line;
  const std::string command = line.substr(cmd_at);
  EXPECT_NE(command.find("--data-dir " + data), std::string::npos) << command;
  EXPECT_NE(command.find("--wal-repair"), std::string::npos) << command;

  // The printed command, as an operator would paste it, repairs and starts.
  const std::string ready_file = data + ".ready";
  std::filesystem::remove(ready_file);
  const std::string repair_log = dir.path() + "/repair.log";
  const pid_t repair = StartShellCommand(command, repair_log);
  ASSERT_GT(repair, 0);
  ASSERT_TRUE(e2e::Eventually([&] { return std::filesystem::exists(ready_file); }, 30'000))
      << ReadFile(repair_log);
  ::kill(repair, SIGTERM);
  int status = 0;
  ASSERT_EQ(::waitpid(repair, &status, 0), repair);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << ReadFile(repair_log);
  EXPECT_NE(ReadFile(repair_log).find("REPAIRED " + damaged), std::string::npos)
      << ReadFile(repair_log);

  // Then a plain start works and keeps everything before the damage: a prefix of the ids.
  ASSERT_TRUE(server.Start()) << server.log();
  auto c = Client::Connect({"127.0.0.1", server.port()});
  ASSERT_TRUE(c.ok());
  int present = 0;
  while (present < kMessages && (*c)->Get("q", "m-" + std::to_string(present)).ok()) ++present;
  for (int i = present; i < kMessages; ++i) {
    EXPECT_FALSE((*c)->Get("q", "m-" + std::to_string(i)).ok()) << "m-" << i << " after a hole";
  }
  // One record per enqueue, plus at most a couple that are not enqueues (the queue's creation).
  EXPECT_LE(static_cast<uint64_t>(present), records_before);
  EXPECT_GE(static_cast<uint64_t>(present) + 2, records_before);
  EXPECT_LT(present, kMessages) << "the damaged record and what follows are dropped";
  std::printf("damage at %s offset %llu: %d of %d messages kept (%llu records before it)\n",
              damaged.c_str(), static_cast<unsigned long long>(offset), present, kMessages,
              static_cast<unsigned long long>(records_before));
}

// Runs in a child of PosixFileSystemUnderTheShim (below) with the shim preloaded; skipped
// otherwise. Arms a fault, makes the POSIX file system fail, and prints the error texts.
TEST(ShimChild, PosixFileErrorsKeepTheirErrno) {
  const char* control = std::getenv("SUNDIAL_FAULT_CONTROL");
  const char* dir = std::getenv("SUNDIAL_FAULT_DIR");
  if (control == nullptr || dir == nullptr || std::getenv("LD_PRELOAD") == nullptr) {
    GTEST_SKIP() << "runs under the shim only";
  }
  auto fs = wal::NewPosixFileSystem();
  const std::string path = std::string(dir) + "/file";
  auto file = fs->NewWritableFile(path);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  ASSERT_TRUE((*file)->Append("some bytes").ok());

  ASSERT_TRUE(ArmFaults(control, "sync EIO\n"));
  const Status eio = (*file)->Sync();
  ASSERT_FALSE(eio.ok());
  EXPECT_EQ(eio.sys_errno(), EIO);
  EXPECT_NE(eio.Message().find("Input/output error (EIO)"), std::string::npos) << eio.Message();

  ASSERT_TRUE(ArmFaults(control, "open EROFS\n"));
  auto erofs = fs->NewWritableFile(std::string(dir) + "/other");
  ASSERT_FALSE(erofs.ok());
  EXPECT_EQ(erofs.status().sys_errno(), EROFS);
  EXPECT_NE(erofs.status().Message().find("Read-only file system (EROFS)"), std::string::npos)
      << erofs.status().Message();
  EXPECT_NE(eio.Message(), erofs.status().Message());

  ASSERT_TRUE(ArmFaults(control, "write ENOSPC\n"));
  auto spare = fs->NewWritableFile(std::string(dir) + "/third");
  ASSERT_TRUE(spare.ok());
  ASSERT_TRUE((*spare)->Append("x").ok());  // buffered
  const Status enospc = (*spare)->Flush();
  EXPECT_EQ(enospc.code(), Code::kResourceExhausted);
  EXPECT_NE(enospc.Message().find("No space left on device (ENOSPC)"), std::string::npos)
      << enospc.Message();
  ASSERT_TRUE(ArmFaults(control, ""));
  std::printf("EIO: %s\nEROFS: %s\nENOSPC: %s\n", eio.ToString().c_str(),
              erofs.status().ToString().c_str(), enospc.ToString().c_str());
}

TEST(PosixFileSystemUnderTheShim, EioAndErofsReadDifferently) {
  TempDir dir;
  const std::string files = dir.path() + "/files";
  std::filesystem::create_directories(files);
  const std::string control = dir.path() + "/control";
  ASSERT_TRUE(ArmFaults(control, ""));
  const std::string out = dir.path() + "/child.out";
  const auto env = ShimEnv(files, control, dir.path() + "/faults.log");
  const pid_t pid = ::fork();
  if (pid == 0) {
    for (const std::string& e : env) ::putenv(const_cast<char*>(e.c_str()));
    const int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::execl("/proc/self/exe", "fault_tests", "--gtest_filter=ShimChild.*",
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  const std::string output = ReadFile(out);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << output;
  EXPECT_EQ(output.find("SKIPPED"), std::string::npos) << output;
  EXPECT_NE(output.find("[  PASSED  ] 1 test"), std::string::npos) << output;
}

}  // namespace
}  // namespace sundial::faults
