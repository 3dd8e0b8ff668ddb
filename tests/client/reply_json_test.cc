// The CLI's JSON for results it is hard to get from a fake server through the binary: explain's
// sentence, watch's events, an error, metadata that is not UTF-8.
#include <gtest/gtest.h>

#include <boost/json/serialize.hpp>
#include <vector>

#include "tools/reply_json.h"

namespace sundial::tools {
namespace {

namespace p = protocol;
namespace json = boost::json;

template <typename T>
const T* Root(const flatbuffers::FlatBufferBuilder& b) {
  return flatbuffers::GetRoot<T>(b.GetBufferPointer());
}

TEST(ReplyJson, ExplainNamesTheReasonAndSaysWhy) {
  flatbuffers::FlatBufferBuilder b;
  b.Finish(p::CreateExplainResultDirect(b, p::ExplainReason::exclusivity_held, "m2",
                                        p::MessageState::pending, 1'700'000'030'000, 77, "acme",
                                        1));
  const json::object o = ExplainToJson(*Root<p::ExplainResult>(b));
  EXPECT_EQ(o.at("reason"), "exclusivity_held");
  EXPECT_EQ(o.at("id"), "m2");
  EXPECT_EQ(o.at("state"), "pending");
  EXPECT_EQ(o.at("lease_token").to_number<int64_t>(), 77);
  EXPECT_EQ(o.at("exclusivity_value"), "acme");
  EXPECT_EQ(o.at("explanation"),
            "exclusivity value 'acme' is held by lease 77 until 1700000030000");
}

TEST(ReplyJson, ExplainOfAKeyAtItsConcurrencySaysHowManyRunAgainstTheLimit) {
  flatbuffers::FlatBufferBuilder b;
  b.Finish(p::CreateExplainResultDirect(b, p::ExplainReason::key_concurrency, "m9",
                                        p::MessageState::pending, 1'700'000'030'000, 41, "acme", 0,
                                        0, 0, nullptr, nullptr, 0, 5, 5));
  const json::object o = ExplainToJson(*Root<p::ExplainResult>(b));
  EXPECT_EQ(o.at("key_running").to_number<int64_t>(), 5);
  EXPECT_EQ(o.at("key_concurrency").to_number<int64_t>(), 5);
  EXPECT_EQ(o.at("explanation"),
            "key acme 5/5 running; the first lease (41) ends at 1700000030000");
}

TEST(ReplyJson, ExplainListsTheDependentsStillWaitingOnlyWhenThereAreSome) {
  flatbuffers::FlatBufferBuilder b;
  const std::vector<flatbuffers::Offset<flatbuffers::String>> dependents = {
      b.CreateString("reports/summary-9"), b.CreateString("archive/extract-9")};
  b.Finish(p::CreateExplainResultDirect(b, p::ExplainReason::dequeueable, "extract-9",
                                        p::MessageState::pending, 0, 0, "", 0, 0, 0, nullptr,
                                        &dependents, 12));
  const json::object o = ExplainToJson(*Root<p::ExplainResult>(b));
  EXPECT_EQ(json::serialize(o.at("dependents")), R"(["reports/summary-9","archive/extract-9"])");
  EXPECT_EQ(o.at("waiting_dependents").to_number<int64_t>(), 12);

  flatbuffers::FlatBufferBuilder none;
  none.Finish(p::CreateExplainResultDirect(none, p::ExplainReason::terminal, "extract-9",
                                           p::MessageState::completed));
  const json::object done = ExplainToJson(*Root<p::ExplainResult>(none));
  EXPECT_FALSE(done.contains("dependents"));
  EXPECT_FALSE(done.contains("waiting_dependents"));
}

TEST(ReplyJson, MessageEventsAndStatsTicks) {
  flatbuffers::FlatBufferBuilder b;
  auto event = p::CreateMessageEventDirect(b, "jobs", "m1", p::MessageState::invisible,
                                           p::MessageState::pending, 4, 1000, "became_visible");
  b.Finish(p::CreateEventMessage(b, p::Event::MessageEvent, event.Union()));
  EXPECT_EQ(json::serialize(EventToJson(*Root<p::EventMessage>(b))),
            R"({"event":"message","queue":"jobs","id":"m1","from":"invisible","to":"pending",)"
            R"("version":4,"time":1000,"cause":"became_visible"})");

  flatbuffers::FlatBufferBuilder t;
  auto stats = p::CreateStatsResult(t, 5000, 2);
  t.Finish(p::CreateEventMessage(t, p::Event::StatsTick, p::CreateStatsTick(t, stats).Union()));
  const json::object tick = EventToJson(*Root<p::EventMessage>(t));
  EXPECT_EQ(tick.at("event"), "stats");
  EXPECT_EQ(tick.at("uptime_ms").to_number<int64_t>(), 5000);
  EXPECT_EQ(tick.at("queues").to_number<int64_t>(), 2);
  EXPECT_EQ(tick.at("messages").at("pending").to_number<int64_t>(), 0);

  flatbuffers::FlatBufferBuilder c;
  c.Finish(p::CreateEventMessage(c, p::Event::SubscriptionClosed,
                                 p::CreateSubscriptionClosedDirect(c, "fell behind").Union()));
  EXPECT_EQ(json::serialize(EventToJson(*Root<p::EventMessage>(c))),
            R"({"event":"closed","reason":"fell behind"})");
}

TEST(ReplyJson, TextThatIsNotUtf8IsWrittenAsBase64) {
  flatbuffers::FlatBufferBuilder b;
  std::vector<flatbuffers::Offset<p::MetadataPair>> pairs{
      p::CreateMetadataPairDirect(b, "k", "\xff")};
  b.Finish(p::CreateMessageDirect(b, "q", "m", 0, nullptr, &pairs));
  const json::object o = MessageToJson(*Root<p::Message>(b));
  EXPECT_FALSE(o.contains("metadata"));
  EXPECT_EQ(json::serialize(o.at("metadata_base64")), R"([["aw==","/w=="]])");
  EXPECT_EQ(o.at("payload"), "");  // no payload: empty text
}

TEST(ReplyJson, WaitItemsShowStateResultOrTheirError) {
  flatbuffers::FlatBufferBuilder b;
  const std::vector<uint8_t> result{'4', '2'};
  b.Finish(p::CreateWaitItemDirect(b, "m1", p::MessageState::completed, &result, ""));
  EXPECT_EQ(json::serialize(WaitItemToJson(*Root<p::WaitItem>(b))),
            R"({"id":"m1","state":"completed","result":"42","last_error":""})");
  flatbuffers::FlatBufferBuilder e;
  auto error = p::CreateErrorDirect(e, p::Code::NOT_FOUND, "id: no such message");
  e.Finish(p::CreateWaitItemDirect(e, "m9", p::MessageState::invisible, nullptr, nullptr, error));
  EXPECT_EQ(json::serialize(WaitItemToJson(*Root<p::WaitItem>(e))),
            R"({"id":"m9","code":"NOT_FOUND","message":"id: no such message"})");
}

TEST(ReplyJson, DependencyResultsAreWaitItemsAndAbsentWhenNotAsked) {
  flatbuffers::FlatBufferBuilder b;
  const std::vector<uint8_t> result{'o', 'k'};
  std::vector<flatbuffers::Offset<p::WaitItem>> deps{
      p::CreateWaitItemDirect(b, "q/parent", p::MessageState::completed, &result, "")};
  auto deps_vector = b.CreateVector(deps);
  auto queue = b.CreateString("q");
  auto id = b.CreateString("child");
  p::MessageBuilder m(b);
  m.add_queue(queue);
  m.add_id(id);
  m.add_dependency_results(deps_vector);
  b.Finish(m.Finish());
  const json::object o = MessageToJson(*Root<p::Message>(b));
  EXPECT_EQ(json::serialize(o.at("dependency_results")),
            R"([{"id":"q/parent","state":"completed","result":"ok","last_error":""}])");

  flatbuffers::FlatBufferBuilder plain;
  plain.Finish(p::CreateMessageDirect(plain, "q", "m"));
  EXPECT_FALSE(MessageToJson(*Root<p::Message>(plain)).contains("dependency_results"));
  flatbuffers::FlatBufferBuilder counts;
  counts.Finish(p::CreateStateCounts(counts, 0, 0, 0, 0, 0, 0, 5, 3, 4, 1));
  const json::object c = CountsToJson(Root<p::StateCounts>(counts));
  EXPECT_EQ(c.at("waiting").to_number<int64_t>(), 3);
  EXPECT_EQ(c.at("blocked").to_number<int64_t>(), 5);
  EXPECT_EQ(c.at("blocked_concurrency").to_number<int64_t>(), 4);
  EXPECT_EQ(c.at("blocked_rate").to_number<int64_t>(), 1);
}

TEST(ReplyJson, ErrorIsCodeAndMessage) {
  EXPECT_EQ(json::serialize(ErrorToJson(
                client::Error::Server(Code::kFailedPrecondition, "lease_token: stale"))),
            R"({"code":"FAILED_PRECONDITION","message":"lease_token: stale"})");
}

}  // namespace
}  // namespace sundial::tools
