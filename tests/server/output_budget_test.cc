// OutputBudget (server/output_budget.h): reading pauses at half of --max-output-bytes, a client
// that lets more than the limit wait behind the write in progress is dropped, and a single reply
// larger than the limit still goes to a client that reads.
#include "server/output_budget.h"

#include <gtest/gtest.h>

namespace sundial::server {
namespace {

TEST(OutputBudget, ReadingPausesAtHalfTheLimitAndResumesAsTheClientReads) {
  OutputBudget b(1000);
  b.Queued(499);
  EXPECT_FALSE(b.high());
  b.Queued(1);
  EXPECT_TRUE(b.high());
  b.WriteStarted(500);
  EXPECT_TRUE(b.high()) << "bytes in a write are unread until the kernel takes them";
  b.Written(1);
  EXPECT_FALSE(b.high());
  b.Written(499);
  b.WriteEnded();
  EXPECT_EQ(b.unread(), 0u);
  EXPECT_FALSE(b.writing());
}

TEST(OutputBudget, OnlyWhatWaitsBehindTheWriteInProgressCountsAgainstTheLimit) {
  OutputBudget b(1000);
  EXPECT_FALSE(b.exceeded()) << "a reply five times the limit is admitted: nothing waits";
  b.Queued(5000);
  EXPECT_TRUE(b.exceeded()) << "until its write starts, it waits: nothing more is admitted";
  b.WriteStarted(5000);
  EXPECT_FALSE(b.exceeded()) << "a single large reply goes to a client that reads";
  b.Queued(1000);
  EXPECT_FALSE(b.exceeded()) << "exactly the limit waits";
  b.Queued(1);
  EXPECT_TRUE(b.exceeded()) << "more than the limit waits behind the write";
  b.Written(5000);
  b.WriteEnded();
  EXPECT_EQ(b.unread(), 1001u);
  EXPECT_TRUE(b.exceeded()) << "with no write in progress, everything queued waits";
}

TEST(OutputBudget, AWriteThatEndsEarlyTakesItsUnwrittenRestWithIt) {
  OutputBudget b(1000);
  b.Queued(300);
  b.WriteStarted(300);
  b.Written(100);
  b.Queued(50);
  b.WriteEnded();  // the socket failed: the rest of the write is gone with the connection
  EXPECT_EQ(b.unread(), 50u);
  EXPECT_FALSE(b.writing());
}

}  // namespace
}  // namespace sundial::server
