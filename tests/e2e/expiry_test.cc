// Expiry, dedupe while_active and debounce against a real sundiald (docs/semantics.md, "Flow
// control"): a message with a short ttl is canceled as expired by the server's timer thread
// (polled with a deadline, nothing dequeued), with its expires_at shown by get and kept over
// kill -9; a released id and a debounce answer as documented.
#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <string>
#include <thread>

#include "client/client.h"
#include "tests/e2e/server_test.h"

namespace sundial::e2e {
namespace {

namespace p = protocol;
using Held = std::optional<client::Result<client::Reply>>;  // keeps a reply's bytes alive

class Expiry : public ServerTest {
 protected:
  const p::Message* GetOne(client::Client& c, const std::string& queue, const std::string& id,
                           Held* keep) {
    keep->emplace(c.Get(queue, id));
    EXPECT_TRUE((*keep)->ok()) << (*keep)->error().ToString();
    if (!(*keep)->ok()) return nullptr;
    return (**keep)->result<p::GetResult>()->message();
  }
  const p::EnqueueResult* EnqueueOne(const client::EnqueueItem& item, const std::string& queue,
                                     Held* keep) {
    keep->emplace(client_->Enqueue(queue, {item}));
    EXPECT_TRUE((*keep)->ok()) << (*keep)->error().ToString();
    if (!(*keep)->ok()) return nullptr;
    const auto* items = (**keep)->result<p::EnqueueResults>()->items();
    EXPECT_EQ(items->size(), 1u);
    EXPECT_EQ(items->Get(0)->error(), nullptr);
    return items->Get(0);
  }
};

TEST_F(Expiry, AMessagePastItsTtlIsCanceledAsExpiredByTheTimerAndStaysSoAfterKillMinus9) {
  client::EnqueueItem item;
  item.id = "short";
  item.payload = "job";
  item.ttl_ms = 300;
  Held enqueued;
  ASSERT_NE(EnqueueOne(item, "q", &enqueued), nullptr);
  Held got;
  const p::Message* m = GetOne(*client_, "q", "short", &got);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->expires_at(), m->enqueued_at() + 300);
  const int64_t expires_at = m->expires_at();
  // Nobody dequeues: the timer thread must wake for the expiry. Poll with a deadline.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  p::MessageState state = p::MessageState::pending;
  while (std::chrono::steady_clock::now() < deadline) {
    m = GetOne(*client_, "q", "short", &got);
    ASSERT_NE(m, nullptr);
    state = m->state();
    if (state == p::MessageState::canceled) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(state, p::MessageState::canceled);
  EXPECT_EQ(m->last_error()->str(), "expired");
  EXPECT_GE(m->updated_at(), expires_at);

  server_->Kill();
  ASSERT_TRUE(server_->Start()) << server_->log();
  auto c = client::Client::Connect({"127.0.0.1", server_->port()});
  ASSERT_TRUE(c.ok());
  m = GetOne(**c, "q", "short", &got);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->state(), p::MessageState::canceled);
  EXPECT_EQ(m->expires_at(), expires_at);
}

TEST_F(Expiry, QueueSettingsDedupeAndDebounceGoThroughTheServer) {
  client::QueueSettings s;
  s.ttl_ms = 60'000;
  s.dedupe = p::Dedupe::while_active;
  ASSERT_TRUE(client_->CreateQueue("d", s).ok());
  auto info = client_->GetQueue("d");
  ASSERT_TRUE(info.ok());
  const p::QueueSettings* settings = info->result<p::QueueResult>()->queue()->settings();
  EXPECT_EQ(settings->ttl_ms(), 60'000);
  EXPECT_EQ(settings->dedupe(), p::Dedupe::while_active);

  client::EnqueueItem item;
  item.id = "a";
  item.payload = "first";
  Held r;
  ASSERT_NE(EnqueueOne(item, "d", &r), nullptr);
  // Debounce: replaced while pending, version 2, invisible for a while.
  client::EnqueueItem again = item;
  again.payload = "second";
  again.debounce_ms = 60'000;
  const p::EnqueueResult* debounced = EnqueueOne(again, "d", &r);
  ASSERT_NE(debounced, nullptr);
  EXPECT_FALSE(debounced->duplicate());
  EXPECT_EQ(debounced->version(), 2u);
  Held got;
  const p::Message* m = GetOne(*client_, "d", "a", &got);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->state(), p::MessageState::invisible);
  EXPECT_EQ(std::string(m->payload()->begin(), m->payload()->end()), "second");
  EXPECT_EQ(m->expires_at(), m->enqueued_at() + 60'000);
  // Released: canceled, then enqueued anew under the same id.
  ASSERT_TRUE(client_->Cancel("d", {"a"}).ok());
  const p::EnqueueResult* anew = EnqueueOne(item, "d", &r);
  ASSERT_NE(anew, nullptr);
  EXPECT_FALSE(anew->duplicate());
  EXPECT_EQ(anew->version(), 1u);
  m = GetOne(*client_, "d", "a", &got);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->state(), p::MessageState::pending);
  // debounce_ms without an id is refused.
  client::EnqueueItem no_id;
  no_id.debounce_ms = 10;
  auto refused = client_->Enqueue("d", {no_id});
  ASSERT_TRUE(refused.ok());
  const auto* e = refused->result<p::EnqueueResults>()->items()->Get(0)->error();
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->code(), p::Code::INVALID_ARGUMENT);
}

}  // namespace
}  // namespace sundial::e2e
