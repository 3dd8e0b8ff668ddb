// sundiald's settings: defaults, flags, SUNDIAL_* variables and a config file, with flags over
// the environment over the file; bad values are usage errors (exit 2) naming the setting.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "server/options.h"

namespace sundial::server {
namespace {

ParseResult Parse(std::vector<std::string> args) {
  args.insert(args.begin(), "sundiald");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  return ParseOptions(static_cast<int>(argv.size()), argv.data());
}

class OptionsTest : public ::testing::Test {
 protected:
  void TearDown() override {
    for (const char* name :
         {"SUNDIAL_PORT", "SUNDIAL_FSYNC", "SUNDIAL_DATA_DIR", "SUNDIAL_WAL_REPAIR"}) {
      unsetenv(name);
    }
    std::filesystem::remove(config_);
  }
  std::string WriteConfig(const std::string& text) {
    std::ofstream(config_) << text;
    return config_;
  }
  std::string config_ = (std::filesystem::temp_directory_path() /
                         ("sundiald-options-" + std::to_string(getpid()) + ".toml"))
                            .string();
};

TEST_F(OptionsTest, DefaultsAreTheSpecs) {
  ParseResult r = Parse({});
  ASSERT_EQ(r.exit_code, -1) << r.message;
  EXPECT_EQ(r.options.data_dir, "./data");
  EXPECT_EQ(r.options.port, 7400);
  EXPECT_EQ(r.options.http_port, 7401);
  EXPECT_EQ(r.options.bind, "127.0.0.1");
  EXPECT_FALSE(r.options.bind_given);
  EXPECT_EQ(r.options.log.policy, wal::FsyncPolicy::kAlways);
  EXPECT_FALSE(r.options.wal_repair);
}

TEST(MemorySizeTest, BytesSuffixesAndPercents) {
  constexpr uint64_t kTotal = uint64_t{8} << 30;
  EXPECT_EQ(ParseMemorySize("1073741824", kTotal), uint64_t{1} << 30);
  EXPECT_EQ(ParseMemorySize("512M", kTotal), uint64_t{512} << 20);
  EXPECT_EQ(ParseMemorySize("512mb", kTotal), uint64_t{512} << 20);
  EXPECT_EQ(ParseMemorySize("4GiB", kTotal), uint64_t{4} << 30);
  EXPECT_EQ(ParseMemorySize("2T", kTotal), uint64_t{2} << 40);
  EXPECT_EQ(ParseMemorySize("64K", kTotal), uint64_t{64} << 10);
  EXPECT_EQ(ParseMemorySize("75%", kTotal), kTotal / 4 * 3);
  EXPECT_EQ(ParseMemorySize("0", kTotal), 0u);
  for (const char* bad : {"", "-1", "12X", "101%", "1.5G", "G", "99999999999999T", "5 %"}) {
    EXPECT_FALSE(ParseMemorySize(bad, kTotal).has_value()) << bad;
  }
}

TEST_F(OptionsTest, MaxMemorySetsTheEngineBudget) {
  ParseResult r = Parse({"--max-memory", "256M"});
  ASSERT_EQ(r.exit_code, -1) << r.message;
  EXPECT_EQ(r.options.memory_budget_bytes, uint64_t{256} << 20);
  r = Parse({"--max-memory=50%"});
  ASSERT_EQ(r.exit_code, -1) << r.message;
  EXPECT_EQ(r.options.memory_budget_bytes, TotalMemoryBytes() / 2);
  EXPECT_GT(TotalMemoryBytes(), 0u);
  r = Parse({"--memory-budget-bytes", "1000"});  // the older name
  ASSERT_EQ(r.exit_code, -1) << r.message;
  EXPECT_EQ(r.options.memory_budget_bytes, 1000u);
  r = Parse({"--max-memory", "lots"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.message.find("--max-memory lots"), std::string::npos) << r.message;
  r = Parse({"--max-memory", "1G", "--memory-budget-bytes", "5"});
  EXPECT_EQ(r.exit_code, 2);
}

TEST_F(OptionsTest, FlagsAreParsed) {
  ParseResult r =
      Parse({"--port", "9000", "--fsync=interval:50", "--wal-repair", "--bind", "0.0.0.0",
             "--insecure-bind", "--allowed-origins", "https://a.example,https://b.example"});
  ASSERT_EQ(r.exit_code, -1) << r.message;
  EXPECT_EQ(r.options.port, 9000);
  EXPECT_EQ(r.options.log.policy, wal::FsyncPolicy::kInterval);
  EXPECT_EQ(r.options.log.interval_ms, 50);
  EXPECT_TRUE(r.options.wal_repair);
  EXPECT_TRUE(r.options.bind_given);
  EXPECT_EQ(r.options.allowed_origins,
            (std::vector<std::string>{"https://a.example", "https://b.example"}));
}

TEST_F(OptionsTest, ListeningBeyondLoopbackNeedsATokenFileOrInsecureBind) {
  for (const char* address : {"127.0.0.1", "127.8.9.10", "::1", "localhost"}) {
    EXPECT_EQ(Parse({"--bind", address}).exit_code, -1) << address;
  }
  for (const char* address : {"0.0.0.0", "10.1.2.3", "::", "128.0.0.1"}) {
    ParseResult r = Parse({"--bind", address});
    EXPECT_EQ(r.exit_code, 2) << address;
    EXPECT_NE(r.message.find("--auth-token-file"), std::string::npos) << r.message;
    EXPECT_NE(r.message.find(address), std::string::npos) << r.message;
    EXPECT_EQ(Parse({"--bind", address, "--insecure-bind"}).exit_code, -1) << address;
    EXPECT_EQ(Parse({"--bind", address, "--auth-token-file", "/some/file"}).exit_code, -1)
        << address;
  }
}

TEST_F(OptionsTest, FlagsWinOverTheEnvironmentWhichWinsOverTheFile) {
  const std::string file =
      WriteConfig("port = 7600\ndata-dir = \"/from/file\"\nfsync = \"never\"\n");
  setenv("SUNDIAL_PORT", "7700", 1);
  setenv("SUNDIAL_DATA_DIR", "/from/env", 1);
  ParseResult r = Parse({"--config", file, "--port", "7800"});
  ASSERT_EQ(r.exit_code, -1) << r.message;
  EXPECT_EQ(r.options.port, 7800);                            // flag
  EXPECT_EQ(r.options.data_dir, "/from/env");                 // environment over file
  EXPECT_EQ(r.options.log.policy, wal::FsyncPolicy::kNever);  // file only
  setenv("SUNDIAL_WAL_REPAIR", "true", 1);
  EXPECT_TRUE(Parse({}).options.wal_repair);
}

TEST_F(OptionsTest, BadValuesAreUsageErrorsNamingTheSetting) {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--port", "70000"},
           {"--port", "abc"},
           {"--fsync", "sometimes"},
           {"--no-such-flag"},
           {"--max-frame-bytes", "1"},
       }) {
    ParseResult r = Parse(args);
    EXPECT_EQ(r.exit_code, 2) << args[0];
    EXPECT_FALSE(r.message.empty()) << args[0];
  }
  EXPECT_NE(Parse({"--fsync", "sometimes"}).message.find("fsync"), std::string::npos);
  setenv("SUNDIAL_FSYNC", "bogus", 1);
  EXPECT_EQ(Parse({}).exit_code, 2);
}

TEST_F(OptionsTest, DashboardIsOnUnlessSetToReadOnlyOrOff) {
  EXPECT_EQ(Parse({}).options.dashboard, DashboardMode::kOn);
  EXPECT_EQ(Parse({"--dashboard", "read-only"}).options.dashboard, DashboardMode::kReadOnly);
  EXPECT_EQ(Parse({"--dashboard=off"}).options.dashboard, DashboardMode::kOff);
  EXPECT_EQ(Parse({"--dashboard", "ON"}).options.dashboard, DashboardMode::kOn);
  setenv("SUNDIAL_DASHBOARD", "read-only", 1);
  EXPECT_EQ(Parse({}).options.dashboard, DashboardMode::kReadOnly);
  unsetenv("SUNDIAL_DASHBOARD");
  ParseResult bad = Parse({"--dashboard", "readonly"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.message.find("dashboard"), std::string::npos) << bad.message;
}

TEST_F(OptionsTest, CheckpointsReplayUnlessSetToFork) {
  EXPECT_EQ(Parse({}).options.checkpoint.mode, wal::CheckpointMode::kReplay);
  EXPECT_EQ(Parse({"--checkpoint-mode", "replay"}).options.checkpoint.mode,
            wal::CheckpointMode::kReplay);
  EXPECT_EQ(Parse({"--checkpoint-mode=FORK"}).options.checkpoint.mode, wal::CheckpointMode::kFork);
  setenv("SUNDIAL_CHECKPOINT_MODE", "fork", 1);
  EXPECT_EQ(Parse({}).options.checkpoint.mode, wal::CheckpointMode::kFork);
  unsetenv("SUNDIAL_CHECKPOINT_MODE");
  ParseResult bad = Parse({"--checkpoint-mode", "copy"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.message.find("checkpoint-mode"), std::string::npos) << bad.message;
}

TEST_F(OptionsTest, AdvertisedAddressesAreHostAndPort) {
  ParseResult r = Parse(
      {"--advertise-addr", "127.0.0.1:9100", "--advertise-replication", "proxy.example:9102"});
  EXPECT_EQ(r.exit_code, -1) << r.message;
  EXPECT_EQ(r.options.advertise_addr, "127.0.0.1:9100");
  EXPECT_EQ(r.options.advertise_replication, "proxy.example:9102");
  EXPECT_EQ(Parse({"--advertise-addr", "[::1]:9100"}).exit_code, -1);
  for (const char* bad : {"127.0.0.1", "127.0.0.1:", ":9100", "host:0", "host:65536", "host:9x"}) {
    ParseResult b = Parse({"--advertise-replication", bad});
    EXPECT_EQ(b.exit_code, 2) << bad;
    EXPECT_NE(b.message.find("--advertise-replication"), std::string::npos) << b.message;
  }
  ParseResult help = Parse({"--help"});
  for (const char* flag : {"--advertise-addr", "--advertise-replication"}) {
    EXPECT_NE(help.message.find(flag), std::string::npos) << flag;
  }
}

TEST_F(OptionsTest, HelpExitsZeroWithEveryFlag) {
  ParseResult r = Parse({"--help"});
  EXPECT_EQ(r.exit_code, 0);
  for (const char* flag :
       {"--data-dir", "--port", "--http-port", "--bind", "--fsync", "--wal-repair",
        "--checkpoint-bytes", "--checkpoint-mode", "--auth-token-file", "--allowed-origins",
        "--insecure-bind", "--max-frame-bytes", "--dashboard", "--tls-cert", "--ready-file",
        "--cluster", "--etcd", "--replication-port", "--sync-timeout-ms"}) {
    EXPECT_NE(r.message.find(flag), std::string::npos) << flag;
  }
  // main() prints the text as a C string: a control byte (an enum printed as a character) once
  // cut --help short after --dashboard.
  for (char c : r.message) {
    EXPECT_TRUE(c == '\n' || static_cast<unsigned char>(c) >= 0x20) << static_cast<int>(c);
  }
}

}  // namespace
}  // namespace sundial::server
