// History against a real sundiald (docs/semantics.md, "History"; docs/protocol.md "History",
// "Note"): a dequeue's worker_id, a note and the completion come back from `history` with their
// actors; the history is equal after kill -9; note is refused for a stale lease and when the
// queue keeps no history (history_max 0).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "client/client.h"
#include "tests/e2e/server_test.h"

namespace sundial::e2e {
namespace {

namespace p = protocol;

struct Entry {
  std::string event, actor, worker_id, text;
  uint64_t lease_token = 0;
  bool operator==(const Entry&) const = default;
};

std::string Text(const flatbuffers::String* s) { return s ? s->str() : std::string(); }

class History : public ServerTest {
 protected:
  std::vector<Entry> HistoryOf(client::Client& c, const std::string& queue, const std::string& id) {
    auto r = c.History(queue, id);
    EXPECT_TRUE(r.ok()) << r.error().ToString();
    std::vector<Entry> out;
    if (!r.ok()) return out;
    const auto* h = r->result<p::HistoryResult>();
    EXPECT_NE(h, nullptr);
    if (h == nullptr || h->entries() == nullptr) return out;
    for (const p::HistoryEntry* e : *h->entries()) {
      out.push_back({Text(e->event()), Text(e->actor()), Text(e->worker_id()), Text(e->text()),
                     e->lease_token()});
    }
    return out;
  }

  uint64_t LeaseAs(const std::string& queue, const std::string& worker) {
    client::DequeueOptions o;
    o.worker_id = worker;
    auto r = client_->Dequeue(queue, o);
    EXPECT_TRUE(r.ok());
    if (!r.ok()) return 0;
    const auto* messages = r->result<p::DequeueResult>()->messages();
    EXPECT_EQ(messages->size(), 1u);
    return messages->size() == 1 ? messages->Get(0)->lease_token() : 0;
  }

  void Put(const std::string& queue, const std::string& id) {
    client::EnqueueItem item;
    item.id = id;
    item.payload = "job";
    auto r = client_->Enqueue(queue, {item});
    ASSERT_TRUE(r.ok()) << r.error().ToString();
  }
};

TEST_F(History, WorkerIdNoteAndCompletionAreInTheHistoryAndSurviveKillMinus9) {
  Put("q", "a");
  const uint64_t token = LeaseAs("q", "host-7");
  auto noted = client_->Note("q", "a", token, "half way");
  ASSERT_TRUE(noted.ok()) << noted.error().ToString();
  auto done = client_->Complete("q", {{"a", token}});
  ASSERT_TRUE(done.ok());
  const std::vector<Entry> want = {
      {"enqueued", "request", "", "", 0},
      {"leased", "worker", "host-7", "host-7", token},
      {"noted", "worker", "host-7", "half way", token},
      {"completed", "worker", "host-7", "", token},
  };
  EXPECT_EQ(HistoryOf(*client_, "q", "a"), want);

  server_->Kill();
  ASSERT_TRUE(server_->Start()) << server_->log();
  auto c = client::Client::Connect({"127.0.0.1", server_->port()});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(HistoryOf(**c, "q", "a"), want);
}

TEST_F(History, NoteNeedsTheCurrentLeaseAndAQueueThatKeepsHistory) {
  Put("q", "a");
  const uint64_t token = LeaseAs("q", "w");
  auto stale = client_->Note("q", "a", token + 1, "x");
  ASSERT_FALSE(stale.ok());
  EXPECT_EQ(stale.error().code, Code::kFailedPrecondition);
  auto missing = client_->History("q", "nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, Code::kNotFound);

  client::QueueSettings off;
  off.history_max = 0;
  ASSERT_TRUE(client_->CreateQueue("quiet", off).ok());
  Put("quiet", "b");
  const uint64_t quiet_token = LeaseAs("quiet", "w");
  auto refused = client_->Note("quiet", "b", quiet_token, "x");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, Code::kFailedPrecondition);
  EXPECT_TRUE(HistoryOf(*client_, "quiet", "b").empty());
  auto info = client_->GetQueue("quiet");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->result<p::QueueResult>()->queue()->settings()->history_max(), 0u);
}

}  // namespace
}  // namespace sundial::e2e
