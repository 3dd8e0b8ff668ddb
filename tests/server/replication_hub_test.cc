// The primary's view of its standbys (server/replication_hub.h): which WAL segments a
// checkpoint must keep for them (docs/replication.md, "Retention").
#include "server/replication_hub.h"

#include <gtest/gtest.h>

#include <limits>
#include <memory>

#include "wal/file.h"
#include "wal/group_commit_log.h"

namespace sundial::server {
namespace {

constexpr uint64_t kNone = std::numeric_limits<uint64_t>::max();

class ReplicationHubTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto opened = wal::GroupCommitLog::Open(fs_.get(), "data", {}, 0, 1);
    ASSERT_TRUE(opened.ok());
    log_ = std::move(opened).value();
    hub_ = std::make_unique<ReplicationHub>(log_.get(), /*sync=*/true);
    hub_->BeginEpoch();
  }
  void TearDown() override { (void)log_->Close(); }

  std::unique_ptr<wal::FileSystem> fs_ = wal::NewMemoryFileSystem();
  std::unique_ptr<wal::GroupCommitLog> log_;
  std::unique_ptr<ReplicationHub> hub_;
};

TEST_F(ReplicationHubTest, RetentionFollowsTheSlowestStandby) {
  EXPECT_EQ(hub_->RetainFrom(), kNone);  // no standby: checkpoints keep nothing for one
  const uint64_t n2 = hub_->Connected("n2", [] {});
  const uint64_t n3 = hub_->Connected("n3", [] {});
  EXPECT_EQ(hub_->RetainFrom(), 0u);  // connected, nothing acknowledged yet: from the start
  hub_->Acked("n2", n2, 40);
  hub_->Acked("n3", n3, 25);
  EXPECT_EQ(hub_->RetainFrom(), 25u);
  hub_->Acked("n3", n3, 60);
  EXPECT_EQ(hub_->RetainFrom(), 40u);
}

// A standby that restarts, or loses the network for a moment, resumes from the log: what it
// acknowledged is kept while it is away, as if it were still connected.
TEST_F(ReplicationHubTest, AStandbyThatLeftKeepsWhatItAcknowledged) {
  const uint64_t n2 = hub_->Connected("n2", [] {});
  const uint64_t n3 = hub_->Connected("n3", [] {});
  hub_->Acked("n2", n2, 30);
  hub_->Acked("n3", n3, 70);
  hub_->Disconnected("n2", n2);
  EXPECT_EQ(hub_->RetainFrom(), 30u);
  const uint64_t again = hub_->Connected("n2", [] {});
  hub_->Acked("n2", again, 80);
  EXPECT_EQ(hub_->RetainFrom(), 70u);
}

// One that left without acknowledging anything in this epoch pins nothing; a new epoch
// forgets what was acknowledged to the previous primary.
TEST_F(ReplicationHubTest, NothingAcknowledgedInThisEpochPinsNothing) {
  const uint64_t n2 = hub_->Connected("n2", [] {});
  hub_->Disconnected("n2", n2);
  EXPECT_EQ(hub_->RetainFrom(), kNone);
  const uint64_t n3 = hub_->Connected("n3", [] {});
  hub_->Acked("n3", n3, 50);
  hub_->Disconnected("n3", n3);
  EXPECT_EQ(hub_->RetainFrom(), 50u);
  hub_->EndEpoch();
  hub_->BeginEpoch();
  EXPECT_EQ(hub_->RetainFrom(), kNone);
}

}  // namespace
}  // namespace sundial::server
