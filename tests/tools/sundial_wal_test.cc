// sundial-wal end to end: builds real data directories (segments and snapshots written by
// wal::LogWriter on the POSIX file system) in a temp dir, damages them with byte-editing helpers,
// runs the built binary and checks its exit code and output (docs/tools.md).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "engine/dependencies.h"
#include "engine/effect.h"
#include "engine/metadata.h"
#include "engine/types.h"
#include "engine/validation.h"
#include "tools/record_json.h"
#include "wal/file.h"
#include "wal/log_format.h"
#include "wal/log_writer.h"

extern char** environ;

namespace sundial::tools {
namespace {

namespace json = boost::json;

std::string AsText(const json::value& v) { return std::string(v.as_string()); }
// Any JSON integer (Boost.JSON parses non-negative ones as int64 when they fit).
uint64_t AsInt(const json::value& v) {
  return v.is_uint64() ? v.as_uint64() : static_cast<uint64_t>(v.as_int64());
}

struct ToolRun {
  int exit_code = -1;
  std::string out;
  std::string err;
  std::vector<std::string> OutLines() const {
    std::vector<std::string> lines;
    std::istringstream in(out);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }
};

class SundialWalToolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "sundial-wal-test-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    root_ = pattern;
    dir_ = root_ + "/data";
    ASSERT_TRUE(fs_->CreateDir(dir_).ok());
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  std::string Path(const std::string& name) const { return wal::JoinPath(dir_, name); }

  // Effects whose strings live as long as the fixture.
  std::string_view Keep(std::string s) { return strings_.emplace_back(std::move(s)); }
  Effect QueueCreated(std::string_view queue) {
    Effect e;
    e.type = EffectType::kQueueCreated;
    e.time = 1'700'000'000'000;
    e.queue = Keep(std::string(queue));
    e.settings = &settings_;
    return e;
  }
  Effect Enqueued(const std::string& id, uint64_t seq) {
    Effect e;
    e.type = EffectType::kMessageEnqueued;
    e.time = 1'700'000'000'000 + static_cast<int64_t>(seq);
    e.queue = "jobs";
    e.id = Keep(id);
    e.from = e.to = MessageState::kPending;
    e.seq = seq;
    e.version = 1;
    e.priority = -static_cast<int64_t>(seq);
    e.max_attempts = 5;
    e.enqueued_at = e.time;
    e.payload = Keep("payload of " + id);
    e.packed_metadata = Keep(PackMetadata({{"tenant", "acme"}}));
    return e;
  }
  Effect Leased(const std::string& id, uint64_t seq) {
    Effect e = Enqueued(id, seq);
    e.type = EffectType::kMessageChanged;
    e.cause = ChangeCause::kLeased;
    e.from = MessageState::kPending;
    e.to = MessageState::kRunning;
    e.version = 2;
    e.attempts = 1;
    e.lease_token = 77;
    return e;
  }
  // `count` enqueue effects m<first>..m<first+count-1>.
  std::vector<Effect> Messages(uint64_t first, uint64_t count) {
    std::vector<Effect> out;
    for (uint64_t i = first; i < first + count; ++i)
      out.push_back(Enqueued("m" + std::to_string(i), i));
    return out;
  }

  // Writes a file of `kind` holding `effects` (and for snapshots a trailer); returns the offset
  // of every record.
  std::vector<uint64_t> WriteFile(const std::string& name, const wal::FileHeader& header,
                                  const std::vector<Effect>& effects,
                                  std::optional<uint64_t> trailer_count) {
    std::vector<uint64_t> offsets;
    auto file = fs_->NewWritableFile(Path(name));
    EXPECT_TRUE(file.ok());
    if (!file.ok()) return offsets;
    wal::LogWriter writer(std::move(*file), header);
    EXPECT_TRUE(writer.WriteHeader().ok());
    for (const Effect& e : effects) {
      offsets.push_back(writer.bytes_written());
      EXPECT_TRUE(writer.AddEffect(e).ok());
    }
    if (trailer_count) {
      offsets.push_back(writer.bytes_written());
      std::string trailer;
      wal::PutFixed64(&trailer, *trailer_count);
      wal::PutFixed64(&trailer, 0x0123456789abcdefULL);
      EXPECT_TRUE(writer.AddRecord(wal::RecordType::kSnapshotTrailer, trailer).ok());
    }
    EXPECT_TRUE(writer.Sync().ok());
    EXPECT_TRUE(writer.Close().ok());
    return offsets;
  }
  std::vector<uint64_t> WriteSegment(uint64_t number, uint64_t lsn,
                                     const std::vector<Effect>& effects) {
    wal::FileHeader header;
    header.file_number = number;
    header.lsn = lsn;
    return WriteFile(wal::SegmentFileName(number), header, effects, std::nullopt);
  }
  // A snapshot whose trailer counts `trailer_count` effects (default: the right number).
  std::vector<uint64_t> WriteSnapshot(uint64_t covered_lsn, const std::vector<Effect>& effects,
                                      std::optional<uint64_t> trailer_count = std::nullopt) {
    wal::FileHeader header;
    header.magic = wal::kSnapshotMagic;
    header.file_number = covered_lsn;
    header.lsn = covered_lsn;
    return WriteFile(wal::SnapshotFileName(covered_lsn), header, effects,
                     trailer_count.value_or(effects.size()));
  }

  uint64_t FileSize(const std::string& name) { return std::filesystem::file_size(Path(name)); }
  void FlipByte(const std::string& name, uint64_t offset) {
    std::fstream f(Path(name), std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(offset));
    char c = 0;
    f.get(c);
    f.seekp(static_cast<std::streamoff>(offset));
    f.put(static_cast<char>(c ^ 0x5a));
  }
  void Truncate(const std::string& name, uint64_t size) {
    std::filesystem::resize_file(Path(name), size);
  }

  // Runs the built tool with `args`, stdout and stderr captured in files beside the data dir.
  ToolRun Run(const std::vector<std::string>& args) {
    const std::string out_path = root_ + "/stdout", err_path = root_ + "/stderr";
    std::vector<std::string> argv_strings = {SUNDIAL_WAL_TOOL};
    argv_strings.insert(argv_strings.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& s : argv_strings) argv.push_back(s.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    ToolRun run;
    pid_t pid = 0;
    int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    EXPECT_EQ(rc, 0) << "posix_spawn " << argv[0];
    if (rc != 0) return run;
    int status = 0;
    EXPECT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status)) << "status " << status;
    if (WIFEXITED(status)) run.exit_code = WEXITSTATUS(status);
    auto read = [](const std::string& path) {
      std::ifstream in(path, std::ios::binary);
      return std::string(std::istreambuf_iterator<char>(in), {});
    };
    run.out = read(out_path);
    run.err = read(err_path);
    return run;
  }

  std::unique_ptr<wal::FileSystem> fs_ = wal::NewPosixFileSystem();
  std::string root_;
  std::string dir_;
  QueueSettings settings_;
  std::deque<std::string> strings_;
};

const std::string kSegment1 = "wal-0000000000000001.log";
const std::string kSegment2 = "wal-0000000000000002.log";
const std::string kSegment3 = "wal-0000000000000003.log";
const std::string kSnapshot3 = "snapshot-0000000000000003.snap";

// --- verify -------------------------------------------------------------------------------

TEST_F(SundialWalToolTest, VerifyAcceptsAGoodLogWithASnapshotAndSegments) {
  std::vector<Effect> state = {QueueCreated("jobs"), Enqueued("m0", 0), Enqueued("m1", 1)};
  WriteSnapshot(3, state);
  WriteSegment(1, 0, {QueueCreated("jobs"), Enqueued("m0", 0), Enqueued("m1", 1)});
  WriteSegment(2, 3, {Leased("m0", 0), Enqueued("m2", 2)});
  ToolRun run = Run({"verify", dir_});
  EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_EQ(run.out,
            "ok: snapshots: 1, segments: 2, records: 9, bytes: " +
                std::to_string(FileSize(kSnapshot3) + FileSize(kSegment1) + FileSize(kSegment2)) +
                ", newest snapshot LSN: 3, next LSN: 5\n");
  EXPECT_EQ(run.err, "");
}

TEST_F(SundialWalToolTest, VerifyAcceptsAnEmptyDirectory) {
  ToolRun run = Run({"verify", dir_});
  EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_EQ(run.out, "ok: snapshots: 0, segments: 0, records: 0, bytes: 0\n");
}

TEST_F(SundialWalToolTest, VerifyNamesTheFileAndOffsetOfAFlippedByteInAMiddleRecord) {
  std::vector<uint64_t> offsets = WriteSegment(1, 0, Messages(0, 5));
  WriteSegment(2, 5, Messages(5, 3));
  FlipByte(kSegment1, offsets[2] + wal::kRecordHeaderBytes + 10);  // in record 2's payload
  ToolRun run = Run({"verify", dir_});
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_EQ(run.out, kSegment1 + " at offset " + std::to_string(offsets[2]) +
                         ": corruption: record checksum mismatch\n");
}

TEST_F(SundialWalToolTest, VerifyCallsAFlippedByteInTheLastSegmentCorruptionNotATear) {
  WriteSegment(1, 0, Messages(0, 2));
  std::vector<uint64_t> offsets = WriteSegment(2, 2, Messages(2, 3));
  FlipByte(kSegment2, offsets[1] + wal::kRecordHeaderBytes);
  ToolRun run = Run({"verify", dir_});
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_EQ(run.out, kSegment2 + " at offset " + std::to_string(offsets[1]) +
                         ": corruption: record checksum mismatch\n");
}

TEST_F(SundialWalToolTest, VerifyWarnsAboutATornTailOfTheLastSegmentAndSucceeds) {
  WriteSegment(1, 0, Messages(0, 2));
  std::vector<uint64_t> offsets = WriteSegment(2, 2, Messages(2, 3));
  const uint64_t torn_size = FileSize(kSegment2) - 5;  // the last record loses its end
  Truncate(kSegment2, torn_size);
  ToolRun run = Run({"verify", dir_});
  EXPECT_EQ(run.exit_code, 0) << run.out;
  std::vector<std::string> lines = run.OutLines();
  ASSERT_EQ(lines.size(), 2u) << run.out;
  EXPECT_EQ(lines[0], "warning: " + kSegment2 + " at offset " + std::to_string(offsets[2]) +
                          ": torn tail: truncated record payload; recovery will cut " +
                          std::to_string(torn_size - offsets[2]) + " bytes");
  EXPECT_EQ(lines[1].rfind("ok: snapshots: 0, segments: 2, records: 4,", 0), 0u) << lines[1];
  EXPECT_EQ(FileSize(kSegment2), torn_size);  // verify changes nothing
}

TEST_F(SundialWalToolTest, VerifyWarnsAboutAnEmptyLastSegmentThatRecoveryWouldRemove) {
  WriteSegment(1, 0, Messages(0, 2));
  ASSERT_TRUE(wal::WriteStringToFile(fs_.get(), Path(kSegment2), "").ok());
  ToolRun run = Run({"verify", dir_});
  EXPECT_EQ(run.exit_code, 0) << run.out;
  std::vector<std::string> lines = run.OutLines();
  ASSERT_EQ(lines.size(), 2u) << run.out;
  EXPECT_EQ(lines[0], "warning: " + kSegment2 +
                          " at offset 0: torn tail: empty file; recovery will remove the file "
                          "(0 bytes)");
  EXPECT_EQ(lines[1].rfind("ok: snapshots: 0, segments: 2, records: 2,", 0), 0u) << lines[1];
}

TEST_F(SundialWalToolTest, VerifyCallsATruncatedSegmentThatIsNotTheLastCorruption) {
  std::vector<uint64_t> offsets = WriteSegment(1, 0, Messages(0, 3));
  WriteSegment(2, 3, Messages(3, 1));
  Truncate(kSegment1, FileSize(kSegment1) - 5);
  ToolRun run = Run({"verify", dir_});
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_EQ(run.out, kSegment1 + " at offset " + std::to_string(offsets[2]) +
                         ": corruption: truncated record payload in a segment that is not the "
                         "last\n");
}

TEST_F(SundialWalToolTest, VerifyNamesTheOffsetOfAFlippedByteInASnapshot) {
  std::vector<uint64_t> offsets =
      WriteSnapshot(3, {QueueCreated("jobs"), Enqueued("m0", 0), Enqueued("m1", 1)});
  WriteSegment(1, 3, Messages(3, 2));
  FlipByte(kSnapshot3, offsets[1] + wal::kRecordHeaderBytes + 3);
  ToolRun run = Run({"verify", dir_});
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_EQ(run.out, kSnapshot3 + " at offset " + std::to_string(offsets[1]) +
                         ": corruption: record checksum mismatch\n");
}

TEST_F(SundialWalToolTest, VerifyReportsASnapshotTrailerCountMismatch) {
  std::vector<uint64_t> offsets = WriteSnapshot(3, {QueueCreated("jobs"), Enqueued("m0", 0)}, 5);
  ToolRun run = Run({"verify", dir_});
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_EQ(run.out, kSnapshot3 + " at offset " + std::to_string(offsets[2]) +
                         ": corruption: snapshot trailer count mismatch: the trailer says 5 "
                         "effects, the file holds 2\n");
}

TEST_F(SundialWalToolTest, VerifyReportsASnapshotCutBeforeItsTrailer) {
  std::vector<uint64_t> offsets = WriteSnapshot(3, {QueueCreated("jobs"), Enqueued("m0", 0)});
  Truncate(kSnapshot3, offsets[2]);  // the trailer is gone, every effect intact
  ToolRun run = Run({"verify", dir_});
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_EQ(run.out, kSnapshot3 + " at offset " + std::to_string(offsets[2]) +
                         ": corruption: snapshot has no trailer\n");
}

TEST_F(SundialWalToolTest, VerifyReportsAMissingSegment) {
  WriteSegment(1, 0, Messages(0, 2));
  WriteSegment(3, 2, Messages(2, 2));
  ToolRun run = Run({"verify", dir_});
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_EQ(run.out, kSegment3 + " at offset 0: corruption: missing segment " + kSegment2 + "\n");
}

TEST_F(SundialWalToolTest, VerifyReportsASegmentWhoseFirstLsnDoesNotContinueThePreviousOne) {
  WriteSegment(1, 0, Messages(0, 2));
  WriteSegment(2, 3, Messages(3, 2));
  ToolRun run = Run({"verify", dir_});
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_EQ(run.out, kSegment2 +
                         " at offset 0: corruption: first LSN 3 does not continue the previous "
                         "segment, which ends at 2\n");
}

TEST_F(SundialWalToolTest, VerifyReportsAFirstSegmentThatStartsAboveTheNewestSnapshot) {
  WriteSnapshot(3, {QueueCreated("jobs")});
  WriteSegment(2, 4, Messages(4, 1));
  ToolRun run = Run({"verify", dir_});
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_EQ(run.out, kSegment2 +
                         " at offset 0: corruption: LSN gap: the first segment starts at LSN 4, "
                         "above the newest snapshot's LSN 3\n");
}

TEST_F(SundialWalToolTest, VerifyReportsAnEffectThatDoesNotDecode) {
  wal::FileHeader header;
  header.file_number = 1;
  auto file = fs_->NewWritableFile(Path(kSegment1));
  ASSERT_TRUE(file.ok());
  wal::LogWriter writer(std::move(*file), header);
  ASSERT_TRUE(writer.WriteHeader().ok());
  ASSERT_TRUE(writer.AddEffect(QueueCreated("jobs")).ok());
  const uint64_t bad_offset = writer.bytes_written();
  ASSERT_TRUE(writer.AddRecord(wal::RecordType::kEffect, "\x63 not an effect").ok());
  ASSERT_TRUE(writer.AddEffect(Enqueued("m0", 0)).ok());
  ASSERT_TRUE(writer.Close().ok());
  ToolRun run = Run({"verify", dir_});
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_EQ(run.out.rfind(kSegment1 + " at offset " + std::to_string(bad_offset) +
                              ": corruption: undecodable effect: ",
                          0),
            0u)
      << run.out;
}

TEST_F(SundialWalToolTest, VerifyIgnoresUnfinishedSnapshots) {
  WriteSegment(1, 0, Messages(0, 2));
  ASSERT_TRUE(wal::WriteStringToFile(fs_.get(), Path(kSnapshot3 + ".tmp"), "half a snapshot").ok());
  ToolRun run = Run({"verify", dir_});
  EXPECT_EQ(run.exit_code, 0) << run.out;
}

// --- dump ---------------------------------------------------------------------------------

TEST_F(SundialWalToolTest, DumpPrintsOneJsonLinePerRecordInFileOrder) {
  std::vector<uint64_t> snapshot_offsets =
      WriteSnapshot(2, {QueueCreated("jobs"), Enqueued("m0", 0)});
  std::vector<uint64_t> offsets1 = WriteSegment(1, 0, {QueueCreated("jobs"), Enqueued("m0", 0)});
  std::vector<uint64_t> offsets2 = WriteSegment(2, 2, {Leased("m0", 0), Enqueued("m1", 1)});
  ToolRun run = Run({"dump", dir_});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.err, "");
  std::vector<std::string> lines = run.OutLines();
  ASSERT_EQ(lines.size(), 3u + 2u + 2u) << run.out;
  std::vector<json::object> records;
  for (const std::string& line : lines) {
    json::value v = json::parse(line);
    ASSERT_TRUE(v.is_object()) << line;
    records.push_back(v.as_object());
  }

  // The snapshot first (name order), its trailer last.
  EXPECT_EQ(AsText(records[0].at("file")), wal::SnapshotFileName(2));
  EXPECT_EQ(AsInt(records[0].at("offset")), snapshot_offsets[0]);
  EXPECT_EQ(AsInt(records[0].at("covered_lsn")), 2u);
  EXPECT_EQ(AsText(records[0].at("record")), "effect");
  EXPECT_EQ(AsText(records[0].at("effect")), "queue_created");
  EXPECT_EQ(AsText(records[0].at("settings").at("type")), "simple");
  EXPECT_EQ(AsText(records[1].at("id")), "m0");
  EXPECT_EQ(AsText(records[2].at("record")), "snapshot_trailer");
  EXPECT_EQ(AsInt(records[2].at("count")), 2u);
  EXPECT_EQ(AsText(records[2].at("digest")), "0123456789abcdef");

  const std::vector<std::string> files = {kSegment1, kSegment1, kSegment2, kSegment2};
  const std::vector<uint64_t> offsets = {offsets1[0], offsets1[1], offsets2[0], offsets2[1]};
  const std::vector<std::string> effects = {"queue_created", "message_enqueued", "message_changed",
                                            "message_enqueued"};
  for (size_t i = 0; i < 4; ++i) {
    const json::object& r = records[3 + i];
    SCOPED_TRACE(lines[3 + i]);
    EXPECT_EQ(AsText(r.at("file")), files[i]);
    EXPECT_EQ(AsInt(r.at("offset")), offsets[i]);
    EXPECT_EQ(AsInt(r.at("lsn")), i);
    EXPECT_EQ(AsInt(r.at("index")), i % 2);
    EXPECT_EQ(AsText(r.at("effect")), effects[i]);
    EXPECT_EQ(AsText(r.at("queue")), "jobs");
  }
  const json::object& enqueued = records[6];
  EXPECT_EQ(AsText(enqueued.at("id")), "m1");
  EXPECT_EQ(AsInt(enqueued.at("seq")), 1u);
  EXPECT_EQ(enqueued.at("priority").as_int64(), -1);
  EXPECT_EQ(AsText(enqueued.at("from")), "pending");
  EXPECT_EQ(AsText(enqueued.at("payload")), "payload of m1");
  EXPECT_EQ(AsText(enqueued.at("metadata").at("tenant")), "acme");
  const json::object& leased = records[5];
  EXPECT_EQ(AsText(leased.at("id")), "m0");
  EXPECT_EQ(AsText(leased.at("cause")), "leased");
  EXPECT_EQ(AsText(leased.at("to")), "running");
  EXPECT_EQ(AsInt(leased.at("lease_token")), 77u);
  EXPECT_FALSE(leased.contains("payload"));  // logged for kMessageEnqueued only
}

TEST_F(SundialWalToolTest, DumpWritesAPayloadThatIsNotUtf8AsBase64) {
  Effect e = Enqueued("m\"0\n", 0);  // quotes and control characters are escaped
  e.payload = Keep(std::string("\xff\x00\x01", 3));
  WriteSegment(1, 0, {e});
  ToolRun run = Run({"dump", dir_});
  EXPECT_EQ(run.exit_code, 0);
  std::vector<std::string> lines = run.OutLines();
  ASSERT_EQ(lines.size(), 1u) << run.out;
  json::object r = json::parse(lines[0]).as_object();
  EXPECT_EQ(AsText(r.at("id")), "m\"0\n");
  EXPECT_FALSE(r.contains("payload"));
  EXPECT_EQ(AsText(r.at("payload_base64")), "/wAB");
}

TEST_F(SundialWalToolTest, DumpPrintsAWaitingMessagesDependenciesAndAResult) {
  const std::vector<std::string> deps = {"jobs/m0", "other/x"};
  Effect waiting = Enqueued("m1", 1);
  waiting.from = waiting.to = MessageState::kWaiting;
  waiting.depends_on = &deps;
  waiting.on_dependency_failure = DependencyFailurePolicy::kRelease;
  // A snapshot's restated dependent: the first edge still listed, the second one's message gone.
  Effect restated = Leased("m1", 1);
  restated.cause = ChangeCause::kNone;
  restated.from = restated.to = MessageState::kWaiting;
  restated.depends_on = &deps;
  const std::string edges = {static_cast<char>(kEdgeListed), static_cast<char>(kEdgeGone)};
  restated.dependency_edges = edges;
  Effect completed = Leased("m0", 0);
  completed.cause = ChangeCause::kCompleted;
  completed.to = MessageState::kCompleted;
  completed.result = "42";
  WriteSegment(1, 0, {waiting, restated, completed});
  ToolRun run = Run({"dump", dir_});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  std::vector<std::string> lines = run.OutLines();
  ASSERT_EQ(lines.size(), 3u) << run.out;
  const json::object a = json::parse(lines[0]).as_object();
  ASSERT_TRUE(a.contains("depends_on")) << lines[0];
  EXPECT_EQ(AsText(a.at("depends_on").as_array()[0]), "jobs/m0");
  EXPECT_EQ(AsText(a.at("depends_on").as_array()[1]), "other/x");
  EXPECT_EQ(AsText(a.at("on_dependency_failure")), "release");
  EXPECT_FALSE(a.contains("dependency_edges"));
  const json::object b = json::parse(lines[1]).as_object();
  ASSERT_TRUE(b.contains("dependency_edges")) << lines[1];
  const json::array& e = b.at("dependency_edges").as_array();
  ASSERT_EQ(e.size(), 2u);
  EXPECT_TRUE(e[0].at("listed").as_bool());
  EXPECT_FALSE(e[0].at("gone").as_bool());
  EXPECT_FALSE(e[1].at("listed").as_bool());
  EXPECT_TRUE(e[1].at("gone").as_bool());
  EXPECT_EQ(AsText(b.at("on_dependency_failure")), "cancel");
  const json::object c = json::parse(lines[2]).as_object();
  EXPECT_EQ(AsText(c.at("result")), "42");
  EXPECT_FALSE(c.contains("depends_on"));
}

TEST_F(SundialWalToolTest, DumpPrintsTheRecordsBeforeDamageAndExitsOne) {
  std::vector<uint64_t> offsets = WriteSegment(1, 0, Messages(0, 4));
  WriteSegment(2, 4, Messages(4, 3));
  FlipByte(kSegment1, offsets[2] + wal::kRecordHeaderBytes);
  ToolRun run = Run({"dump", dir_});
  EXPECT_EQ(run.exit_code, 1);
  // Segment 1 up to the damage, then every record of segment 2 (dump reads on).
  std::vector<std::string> lines = run.OutLines();
  ASSERT_EQ(lines.size(), 2u + 3u) << run.out;
  EXPECT_EQ(AsText(json::parse(lines[1]).at("id")), "m1");
  EXPECT_EQ(AsText(json::parse(lines[2]).at("id")), "m4");
  EXPECT_EQ(run.err, kSegment1 + " at offset " + std::to_string(offsets[2]) +
                         ": corruption: record checksum mismatch\n");
}

// --- stats --------------------------------------------------------------------------------

TEST_F(SundialWalToolTest, StatsReportsRecordCountsPerFileAndInTotal) {
  WriteSnapshot(3, {QueueCreated("jobs"), Enqueued("m0", 0), Enqueued("m1", 1)});
  WriteSegment(1, 0, {QueueCreated("jobs"), Enqueued("m0", 0), Enqueued("m1", 1)});
  WriteSegment(2, 3, {Leased("m0", 0), Enqueued("m2", 2)});

  ToolRun text = Run({"stats", dir_});
  EXPECT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("segments: 2  snapshots: 1  bytes: "), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("records: 9\n"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("message_enqueued 5, message_changed 1"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("newest snapshot: covered LSN 3"), std::string::npos) << text.out;

  ToolRun run = Run({"stats", "--json", dir_});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  std::vector<std::string> lines = run.OutLines();
  ASSERT_EQ(lines.size(), 1u) << run.out;
  json::object stats = json::parse(lines[0]).as_object();
  EXPECT_EQ(AsInt(stats.at("segments")), 2u);
  EXPECT_EQ(AsInt(stats.at("snapshots")), 1u);
  EXPECT_EQ(AsInt(stats.at("records")), 9u);
  EXPECT_EQ(AsInt(stats.at("bytes")),
            FileSize(kSnapshot3) + FileSize(kSegment1) + FileSize(kSegment2));
  EXPECT_EQ(AsInt(stats.at("effects_by_type").at("queue_created")), 2u);
  EXPECT_EQ(AsInt(stats.at("effects_by_type").at("message_enqueued")), 5u);
  EXPECT_EQ(AsInt(stats.at("effects_by_type").at("message_changed")), 1u);
  EXPECT_EQ(AsInt(stats.at("newest_snapshot_lsn")), 3u);
  EXPECT_EQ(AsInt(stats.at("first_lsn")), 0u);
  EXPECT_EQ(AsInt(stats.at("next_lsn")), 5u);
  EXPECT_FALSE(stats.at("damaged").as_bool());
  const json::array& files = stats.at("files").as_array();
  ASSERT_EQ(files.size(), 3u);
  EXPECT_EQ(AsText(files[0].at("file")), kSnapshot3);
  EXPECT_EQ(AsInt(files[0].at("records")), 4u);  // three effects and the trailer
  EXPECT_EQ(AsInt(files[0].at("effects")), 3u);
  EXPECT_EQ(AsText(files[2].at("file")), kSegment2);
  EXPECT_EQ(AsInt(files[2].at("records")), 2u);
  EXPECT_EQ(AsInt(files[2].at("first_lsn")), 3u);
  EXPECT_EQ(AsInt(files[2].at("last_lsn")), 4u);
}

TEST_F(SundialWalToolTest, StatsShowsATornTailWithTheBytesRecoveryWouldCut) {
  std::vector<uint64_t> offsets = WriteSegment(1, 0, Messages(0, 3));
  Truncate(kSegment1, offsets[2] + 4);
  ToolRun run = Run({"stats", "--json", dir_});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  json::object stats = json::parse(run.out).as_object();
  const json::object& damage = stats.at("files").at(0).at("damage").as_object();
  EXPECT_EQ(AsText(damage.at("kind")), "torn tail");
  EXPECT_EQ(AsInt(damage.at("offset")), offsets[2]);
  EXPECT_EQ(AsInt(damage.at("torn_bytes")), 4u);
  EXPECT_EQ(AsInt(stats.at("records")), 2u);
}

// --- usage and I/O errors -----------------------------------------------------------------

TEST_F(SundialWalToolTest, BadUsageExitsTwo) {
  EXPECT_EQ(Run({}).exit_code, 2);
  EXPECT_EQ(Run({"verify"}).exit_code, 2);
  EXPECT_EQ(Run({"frobnicate", dir_}).exit_code, 2);
  EXPECT_EQ(Run({"stats", "--bogus", dir_}).exit_code, 2);
  EXPECT_EQ(Run({"verify", dir_, dir_}).exit_code, 2);
  ToolRun help = Run({"--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("verify"), std::string::npos);
}

TEST_F(SundialWalToolTest, AMissingDirectoryExitsThree) {
  ToolRun run = Run({"verify", root_ + "/no-such-dir"});
  EXPECT_EQ(run.exit_code, 3);
  EXPECT_NE(run.err.find("cannot read " + root_ + "/no-such-dir"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("No such file or directory (ENOENT)"), std::string::npos) << run.err;
}

// --- record JSON helpers ------------------------------------------------------------------

TEST(RecordJsonTest, Base64EncodesRfc4648TestVectors) {
  EXPECT_EQ(Base64Encode(""), "");
  EXPECT_EQ(Base64Encode("f"), "Zg==");
  EXPECT_EQ(Base64Encode("fo"), "Zm8=");
  EXPECT_EQ(Base64Encode("foo"), "Zm9v");
  EXPECT_EQ(Base64Encode("foob"), "Zm9vYg==");
  EXPECT_EQ(Base64Encode("fooba"), "Zm9vYmE=");
  EXPECT_EQ(Base64Encode("foobar"), "Zm9vYmFy");
}

TEST(RecordJsonTest, Utf8CheckRejectsOverlongSurrogateAndTruncatedSequences) {
  EXPECT_TRUE(IsValidUtf8("plain ascii"));
  EXPECT_TRUE(IsValidUtf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));
  EXPECT_FALSE(IsValidUtf8("\xc0\xaf"));          // overlong '/'
  EXPECT_FALSE(IsValidUtf8("\xed\xa0\x80"));      // surrogate U+D800
  EXPECT_FALSE(IsValidUtf8("\xf4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_FALSE(IsValidUtf8("\xe2\x82"));          // truncated
  EXPECT_FALSE(IsValidUtf8("\x80"));              // lone continuation byte
}

}  // namespace
}  // namespace sundial::tools
