// Watch against a real etcd: replay from a past revision, live events, prefixes, a txn's
// events in one batch, a break when etcd goes (and a re-watch from resume_revision that misses
// nothing), a prompt Stop() even with etcd paused, the idle timeout.
#include <gtest/gtest.h>

#include <thread>

#include "replication/etcd_client.h"
#include "replication/etcd_watch.h"
#include "tests/replication/etcd_process.h"

namespace sundial::replication {
namespace {

using testing::Clock;
using testing::EtcdProcess;
using testing::Eventually;
using testing::Millis;
using testing::MsSince;

EtcdClientOptions OptionsFor(const EtcdProcess& etcd) {
  EtcdClientOptions options;
  options.endpoints = {etcd.endpoint()};
  options.call_timeout = Millis(10'000);
  return options;
}

WatchOptions WatchOf(std::string key, bool prefix, int64_t start_revision) {
  WatchOptions options;
  options.key = std::move(key);
  options.prefix = prefix;
  options.start_revision = start_revision;
  return options;
}

// Pops items until `count` events arrived (or a break, or 15 s): the events, in order.
std::vector<WatchEvent> Collect(WatchQueue& queue, size_t count,
                                std::optional<WatchBreak>* broken = nullptr) {
  std::vector<WatchEvent> events;
  const auto deadline = Clock::now() + Millis(15'000);
  while (events.size() < count) {
    auto item = queue.Pop(deadline);
    if (!item) break;
    if (item->broken) {
      if (broken) *broken = item->broken;
      break;
    }
    events.insert(events.end(), item->events.begin(), item->events.end());
  }
  return events;
}

class EtcdWatchTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    etcd_ = new EtcdProcess();
    ASSERT_TRUE(etcd_->Start()) << etcd_->log();
  }
  static void TearDownTestSuite() {
    delete etcd_;
    etcd_ = nullptr;
  }
  static std::string Prefix() {
    return std::string("/w/") + ::testing::UnitTest::GetInstance()->current_test_info()->name() +
           "/";
  }
  static EtcdResult<std::unique_ptr<Watch>> Start(WatchOptions options, WatchQueue& queue) {
    return Watch::Start({etcd_->endpoint()}, std::move(options), queue.callbacks(),
                        Deadline::In(Millis(10'000)));
  }

  static EtcdProcess* etcd_;
  EtcdClient client_{OptionsFor(*etcd_)};
};

EtcdProcess* EtcdWatchTest::etcd_ = nullptr;

TEST_F(EtcdWatchTest, WatchFromAPastRevisionReplaysEveryEventInOrder) {
  const std::string p = Prefix();
  auto r1 = client_.Put(p + "a", "1");
  ASSERT_TRUE(r1.ok());
  auto r2 = client_.Put(p + "b", "2");
  auto r3 = client_.Delete(p + "a");
  auto r4 = client_.Put(p + "a", "3");
  ASSERT_TRUE(r2.ok() && r3.ok() && r4.ok());
  ASSERT_TRUE(client_.Put("/w-other/" + p, "x").ok());  // not under the prefix

  WatchQueue queue;
  auto watch = Start(WatchOf(p, true, r1->header.revision), queue);
  ASSERT_TRUE(watch.ok()) << watch.error().ToString();
  const auto events = Collect(queue, 4);
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].type, WatchEvent::Type::kPut);
  EXPECT_EQ(events[0].kv.key, p + "a");
  EXPECT_EQ(events[0].kv.value, "1");
  EXPECT_EQ(events[0].kv.mod_revision, r1->header.revision);
  EXPECT_EQ(events[0].kv.create_revision, r1->header.revision);
  EXPECT_EQ(events[1].kv.key, p + "b");
  EXPECT_EQ(events[1].kv.mod_revision, r2->header.revision);
  EXPECT_EQ(events[2].type, WatchEvent::Type::kDelete);
  EXPECT_EQ(events[2].kv.key, p + "a");
  EXPECT_EQ(events[2].kv.mod_revision, r3->header.revision);
  EXPECT_TRUE(events[2].kv.value.empty());
  EXPECT_EQ(events[3].type, WatchEvent::Type::kPut);
  EXPECT_EQ(events[3].kv.value, "3");
  EXPECT_EQ(events[3].kv.create_revision, r4->header.revision) << "a new life of the key";
  EXPECT_EQ((*watch)->resume_revision(), r4->header.revision + 1);
  EXPECT_EQ((*watch)->endpoint(), etcd_->endpoint());
}

TEST_F(EtcdWatchTest, WatchFromNowSeesLaterChangesOfItsKeyOnlyWithPreviousValues) {
  const std::string key = Prefix() + "leader";
  ASSERT_TRUE(client_.Put(key, "before").ok());
  WatchQueue queue;
  WatchOptions options = WatchOf(key, false, 0);
  options.prev_kv = true;
  auto watch = Start(options, queue);
  ASSERT_TRUE(watch.ok()) << watch.error().ToString();
  // Start returned after etcd confirmed the watch: these changes are all seen.
  ASSERT_TRUE(client_.Put(key + "-other", "x").ok());
  auto put = client_.Put(key, "after");
  auto del = client_.Delete(key);
  ASSERT_TRUE(put.ok() && del.ok());
  const auto events = Collect(queue, 2);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].type, WatchEvent::Type::kPut);
  EXPECT_EQ(events[0].kv.value, "after");
  ASSERT_TRUE(events[0].prev_kv.has_value());
  EXPECT_EQ(events[0].prev_kv->value, "before");
  EXPECT_EQ(events[1].type, WatchEvent::Type::kDelete);
  EXPECT_EQ(events[1].kv.mod_revision, del->header.revision);
  ASSERT_TRUE(events[1].prev_kv.has_value());
  EXPECT_EQ(events[1].prev_kv->value, "after");
}

TEST_F(EtcdWatchTest, ATransactionsEventsArriveInOneBatch) {
  const std::string p = Prefix();
  WatchQueue queue;
  auto watch = Start(WatchOf(p, true, 0), queue);
  ASSERT_TRUE(watch.ok()) << watch.error().ToString();
  TxnRequest txn;
  txn.success = {TxnOp::Put(p + "leader", "a"), TxnOp::Put(p + "sync", "b")};
  auto done = client_.Txn(txn);
  ASSERT_TRUE(done.ok() && done->succeeded);
  auto item = queue.Pop(Clock::now() + Millis(15'000));
  ASSERT_TRUE(item.has_value());
  ASSERT_EQ(item->events.size(), 2u);
  EXPECT_EQ(item->events[0].kv.mod_revision, done->header.revision);
  EXPECT_EQ(item->events[1].kv.mod_revision, done->header.revision);
}

TEST_F(EtcdWatchTest, StopReturnsPromptlyAndNothingIsDeliveredAfter) {
  const std::string key = Prefix() + "quiet";
  std::atomic<int> calls{0};
  WatchCallbacks callbacks{[&](const std::vector<WatchEvent>&) { ++calls; },
                           [&](const WatchBreak&) { ++calls; }};
  auto watch = Watch::Start({etcd_->endpoint()}, WatchOf(key, false, 0), callbacks,
                            Deadline::In(Millis(10'000)));
  ASSERT_TRUE(watch.ok()) << watch.error().ToString();
  const auto start = Clock::now();
  std::thread stopper([&] { (*watch)->Stop(); });  // from another thread, while it reads
  stopper.join();
  EXPECT_LT(MsSince(start), 2'000);
  (*watch)->Stop();  // idempotent
  ASSERT_TRUE(client_.Put(key, "after stop").ok());
  EXPECT_EQ(calls, 0);
}

TEST_F(EtcdWatchTest, EmptyKeyIsRefusedAndNoEndpointIsUnavailable) {
  WatchQueue queue;
  auto empty = Start(WatchOf("", false, 0), queue);
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.error().code, Code::kInvalidArgument);
  const auto dead = testing::FreeLoopbackPorts(1)[0];
  auto refused = Watch::Start({{"127.0.0.1", dead}}, WatchOf("k", false, 0), queue.callbacks(),
                              Deadline::In(Millis(10'000)));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, Code::kUnavailable);
  EXPECT_NE(refused.error().message.find("127.0.0.1:" + std::to_string(dead)), std::string::npos);
}

// Each case below owns its etcd: it kills or pauses it.

TEST(EtcdWatchFaults, WatchBreaksWhenEtcdDiesAndAReWatchFromResumeRevisionMissesNothing) {
  EtcdProcess etcd;
  ASSERT_TRUE(etcd.Start()) << etcd.log();
  EtcdClient client(OptionsFor(etcd));
  auto first = client.Put("/k/a", "1");
  ASSERT_TRUE(first.ok());
  WatchQueue queue;
  auto watch = Watch::Start({etcd.endpoint()}, WatchOf("/k/", true, first->header.revision),
                            queue.callbacks(), Deadline::In(Millis(10'000)));
  ASSERT_TRUE(watch.ok()) << watch.error().ToString();
  ASSERT_EQ(Collect(queue, 1).size(), 1u);

  etcd.Kill();
  std::optional<WatchBreak> broken;
  Collect(queue, 1, &broken);
  ASSERT_TRUE(broken.has_value()) << "no break reported";
  EXPECT_EQ(broken->error.code, Code::kUnavailable);
  EXPECT_NE(broken->error.message.find(etcd.client_url()), std::string::npos);
  EXPECT_EQ(broken->resume_revision, first->header.revision + 1);
  (*watch)->Stop();

  // etcd comes back with its data; changes made before the re-watch are replayed to it.
  ASSERT_TRUE(etcd.Restart()) << etcd.log();
  auto second = client.Put("/k/b", "2");
  ASSERT_TRUE(second.ok()) << second.error().ToString();
  WatchQueue again;
  auto rewatch = Watch::Start({etcd.endpoint()}, WatchOf("/k/", true, broken->resume_revision),
                              again.callbacks(), Deadline::In(Millis(10'000)));
  ASSERT_TRUE(rewatch.ok()) << rewatch.error().ToString();
  const auto events = Collect(again, 1);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kv.key, "/k/b");
  EXPECT_EQ(events[0].kv.mod_revision, second->header.revision);
}

TEST(EtcdWatchFaults, StopIsPromptWhileEtcdIsPaused) {
  EtcdProcess etcd;
  ASSERT_TRUE(etcd.Start()) << etcd.log();
  WatchQueue queue;
  auto watch = Watch::Start({etcd.endpoint()}, WatchOf("/k", false, 0), queue.callbacks(),
                            Deadline::In(Millis(10'000)));
  ASSERT_TRUE(watch.ok()) << watch.error().ToString();
  etcd.Pause();
  const auto start = Clock::now();
  (*watch)->Stop();
  EXPECT_LT(MsSince(start), 2'000);
  EXPECT_FALSE(queue.Pop(Clock::now()).has_value()) << "a stop is not a break";
  etcd.Resume();
}

TEST(EtcdWatchFaults, IdleTimeoutBreaksAWatchOnAPausedEtcd) {
  EtcdProcess etcd;
  ASSERT_TRUE(etcd.Start()) << etcd.log();
  WatchQueue queue;
  WatchOptions options = WatchOf("/k", false, 0);
  options.idle_timeout = Millis(300);
  auto watch =
      Watch::Start({etcd.endpoint()}, options, queue.callbacks(), Deadline::In(Millis(10'000)));
  ASSERT_TRUE(watch.ok()) << watch.error().ToString();
  etcd.Pause();
  auto item = queue.Pop(Clock::now() + Millis(15'000));
  etcd.Resume();
  ASSERT_TRUE(item.has_value());
  ASSERT_TRUE(item->broken.has_value());
  EXPECT_EQ(item->broken->error.code, Code::kUnavailable);
  EXPECT_NE(item->broken->error.message.find("nothing received"), std::string::npos)
      << item->broken->error.message;
}

TEST(EtcdWatchFaults, ProgressNotificationsKeepAnIdleWatchAliveAndAdvanceItsResumeRevision) {
  EtcdProcess etcd({"--experimental-watch-progress-notify-interval=100ms"});
  ASSERT_TRUE(etcd.Start()) << etcd.log();
  EtcdClient client(OptionsFor(etcd));
  WatchQueue queue;
  WatchOptions options = WatchOf("/quiet", false, 0);
  options.idle_timeout = Millis(5'000);
  auto watch =
      Watch::Start({etcd.endpoint()}, options, queue.callbacks(), Deadline::In(Millis(10'000)));
  ASSERT_TRUE(watch.ok()) << watch.error().ToString();
  const int64_t at_start = (*watch)->resume_revision();
  auto other = client.Put("/elsewhere", "x");  // moves the store's revision, not this key
  ASSERT_TRUE(other.ok());
  // A progress notification tells the watch that nothing of its key happened up to now.
  EXPECT_TRUE(Eventually([&] { return (*watch)->resume_revision() > other->header.revision; }))
      << "resume revision stayed at " << (*watch)->resume_revision() << " from " << at_start;
  EXPECT_FALSE(queue.Pop(Clock::now()).has_value());
}

}  // namespace
}  // namespace sundial::replication
