#include "replication/etcd_watch.h"

#include <algorithm>
#include <atomic>
#include <boost/json/serialize.hpp>
#include <boost/json/stream_parser.hpp>
#include <thread>

#include "replication/etcd_json.h"
#include "replication/http_connection.h"

namespace sundial::replication {
namespace {

namespace bj = boost::json;

constexpr std::string_view kWatchPath = "/v3/watch";
constexpr std::chrono::milliseconds kDefaultStartTimeout{1000};
constexpr std::chrono::milliseconds kMinAttempt{100};
constexpr size_t kErrorBodyLimit = 64 * 1024;

template <typename T>
bool Failed(const json::Decoded<T>& d) {
  return std::holds_alternative<json::DecodeError>(d);
}

bj::object EncodeCreate(const WatchOptions& options) {
  bj::object create;
  const std::string range_end = options.prefix ? PrefixRangeEnd(options.key) : std::string();
  create["key"] = json::Base64Encode(options.key.empty() && options.prefix ? std::string(1, '\0')
                                                                           : options.key);
  if (!range_end.empty()) create["range_end"] = json::Base64Encode(range_end);
  if (options.start_revision > 0) create["start_revision"] = std::to_string(options.start_revision);
  create["progress_notify"] = true;
  if (options.prev_kv) create["prev_kv"] = true;
  bj::object body;
  body["create_request"] = std::move(create);
  return body;
}

json::Decoded<WatchEvent> DecodeEvent(const bj::value& v) {
  if (!v.is_object()) return json::DecodeError{"events: not an object"};
  const bj::object& o = v.as_object();
  WatchEvent event;
  if (const bj::value* type = o.if_contains("type"); type != nullptr && !type->is_null()) {
    if (type->is_string() && (type->as_string() == "PUT" || type->as_string() == "DELETE")) {
      event.type = type->as_string() == "PUT" ? WatchEvent::Type::kPut : WatchEvent::Type::kDelete;
    } else if (type->is_int64() && (type->as_int64() == 0 || type->as_int64() == 1)) {
      event.type = type->as_int64() == 0 ? WatchEvent::Type::kPut : WatchEvent::Type::kDelete;
    } else {
      return json::DecodeError{"events.type: neither PUT nor DELETE"};
    }
  }
  const bj::value* kv = o.if_contains("kv");
  if (kv == nullptr) return json::DecodeError{"events.kv: missing"};
  auto decoded = json::DecodeKeyValue(*kv);
  if (Failed(decoded)) return std::get<json::DecodeError>(decoded);
  event.kv = std::get<KeyValue>(std::move(decoded));
  if (const bj::value* prev = o.if_contains("prev_kv"); prev != nullptr && !prev->is_null()) {
    auto p = json::DecodeKeyValue(*prev);
    if (Failed(p)) return std::get<json::DecodeError>(p);
    event.prev_kv = std::get<KeyValue>(std::move(p));
  }
  return event;
}

}  // namespace

struct Watch::Impl {
  EtcdEndpoint endpoint;
  WatchOptions options;
  WatchCallbacks callbacks;
  std::unique_ptr<HttpConnection> connection;
  std::string where;  // "etcd http://...:2379/v3/watch"

  // Bytes received and not yet given to the parser, and the message being parsed.
  std::string pending;
  bj::stream_parser parser;
  size_t message_bytes = 0;

  std::atomic<int64_t> resume{0};
  std::atomic<bool> stopping{false};
  std::thread thread;

  Impl(EtcdEndpoint e, WatchOptions o, WatchCallbacks c)
      : endpoint(std::move(e)),
        options(std::move(o)),
        callbacks(std::move(c)),
        connection(std::make_unique<HttpConnection>(endpoint, options.max_message_bytes)),
        where(connection->Describe(kWatchPath)) {}

  EtcdError Malformed(std::string what) const {
    return {Code::kInternal, where + ": malformed watch message: " + what, false};
  }

  // The next JSON object of the stream, waiting until `deadline` for bytes.
  EtcdResult<bj::object> NextMessage(EtcdClock::time_point deadline) {
    while (true) {
      if (!pending.empty()) {
        boost::system::error_code ec;
        const size_t n = parser.write_some(pending.data(), pending.size(), ec);
        if (ec) return Malformed("not JSON: " + ec.message());
        message_bytes += n;
        pending.erase(0, n);
        if (parser.done()) {
          bj::value value = parser.release();
          parser.reset();
          message_bytes = 0;
          if (!value.is_object()) return Malformed("not a JSON object");
          return std::move(value.as_object());
        }
        if (message_bytes > options.max_message_bytes) {
          return Malformed("a message over " + std::to_string(options.max_message_bytes) +
                           " bytes");
        }
        if (!pending.empty()) continue;
      }
      auto more = connection->ReadStream(pending, deadline);
      if (!more.ok()) return more.error();
      if (!*more) return EtcdError{Code::kUnavailable, where + ": etcd ended the stream", false};
    }
  }

  // What one message means: nullopt to go on, or the break it reports. Delivers its events.
  // `first`: the stream's first message, which must confirm the watch (or refuse it).
  std::optional<WatchBreak> Handle(const bj::object& message, bool first, bool* created) {
    if (auto error = json::FindError(message)) {
      Code code = json::CodeOfGrpc(error->grpc_code);
      if (code == Code::kOk || code == Code::kInternal) code = Code::kUnavailable;
      return WatchBreak{{code, where + ": " + error->message, false}, resume.load(), 0};
    }
    const bj::value* r = message.if_contains("result");
    if (r == nullptr || !r->is_object()) return WatchBreak{Malformed("no result"), resume, 0};
    const bj::object& result = r->as_object();
    auto header = json::DecodeHeader(result);
    if (Failed(header)) {
      return WatchBreak{Malformed(std::get<json::DecodeError>(header).what), resume, 0};
    }
    auto is_created = json::BoolField(result, "created");
    auto canceled = json::BoolField(result, "canceled");
    auto compact = json::Int64Field(result, "compact_revision");
    if (Failed(is_created) || Failed(canceled) || Failed(compact)) {
      return WatchBreak{Malformed("created, canceled or compact_revision of the wrong type"),
                        resume, 0};
    }
    if (std::get<bool>(canceled)) {
      const int64_t compact_revision = std::get<int64_t>(compact);
      std::string reason;
      if (const bj::value* why = result.if_contains("cancel_reason");
          why != nullptr && why->is_string()) {
        reason = std::string(why->as_string());
      }
      if (compact_revision > 0) {
        return WatchBreak{{Code::kFailedPrecondition,
                           where + ": revision " + std::to_string(resume.load()) +
                               " is compacted; the earliest is " + std::to_string(compact_revision),
                           false},
                          resume,
                          compact_revision};
      }
      return WatchBreak{
          {Code::kUnavailable,
           where + ": etcd cancelled the watch" + (reason.empty() ? "" : ": " + reason), false},
          resume,
          0};
    }
    if (std::get<bool>(is_created) != first) {
      return WatchBreak{
          Malformed(first ? "the first message is not \"created\"" : "a second \"created\""),
          resume, 0};
    }
    if (std::get<bool>(is_created)) {
      *created = true;
      // From "now": the first revision not yet written when etcd created the watch.
      if (options.start_revision <= 0) resume = std::get<ResponseHeader>(header).revision + 1;
      return std::nullopt;
    }
    std::vector<WatchEvent> events;
    if (const bj::value* list = result.if_contains("events"); list != nullptr && !list->is_null()) {
      if (!list->is_array()) return WatchBreak{Malformed("events: not an array"), resume, 0};
      for (const bj::value& v : list->as_array()) {
        auto event = DecodeEvent(v);
        if (Failed(event)) {
          return WatchBreak{Malformed(std::get<json::DecodeError>(event).what), resume, 0};
        }
        events.push_back(std::get<WatchEvent>(std::move(event)));
      }
    }
    if (events.empty()) {
      // A progress notification: every event up to header.revision has been sent.
      const int64_t next = std::get<ResponseHeader>(header).revision + 1;
      if (next > resume) resume = next;
      return std::nullopt;
    }
    for (const WatchEvent& e : events) {
      if (e.kv.mod_revision < resume) {
        return WatchBreak{Malformed("an event older than one already delivered"), resume, 0};
      }
    }
    resume = events.back().kv.mod_revision + 1;
    if (callbacks.on_events) callbacks.on_events(events);
    return std::nullopt;
  }

  void Run() {
    while (!stopping) {
      const auto deadline = options.idle_timeout.count() > 0
                                ? EtcdClock::now() + options.idle_timeout
                                : EtcdClock::time_point::max();
      auto message = NextMessage(deadline);
      if (stopping) break;
      std::optional<WatchBreak> broken;
      bool created = false;
      if (!message.ok()) {
        broken = WatchBreak{message.error(), resume, 0};
      } else {
        broken = Handle(*message, /*first=*/false, &created);
      }
      if (broken) {
        connection->Close();
        if (!stopping && callbacks.on_broken) callbacks.on_broken(*broken);
        return;
      }
    }
    connection->Close();
  }
};

Watch::Watch(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Watch::~Watch() { Stop(); }

void Watch::Stop() {
  if (!impl_ || !impl_->thread.joinable()) return;
  impl_->stopping = true;
  impl_->connection->Interrupt();
  // From a callback (documented as not allowed): the loop ends when the callback returns.
  if (std::this_thread::get_id() == impl_->thread.get_id()) return;
  impl_->thread.join();
}

const EtcdEndpoint& Watch::endpoint() const { return impl_->endpoint; }

int64_t Watch::resume_revision() const { return impl_->resume.load(); }

EtcdResult<std::unique_ptr<Watch>> Watch::Start(const std::vector<EtcdEndpoint>& endpoints,
                                                WatchOptions options, WatchCallbacks callbacks,
                                                Deadline deadline) {
  if (endpoints.empty()) {
    return EtcdError{Code::kInvalidArgument, "etcd watch: no endpoints configured", false};
  }
  if (options.key.empty() && !options.prefix) {
    return EtcdError{Code::kInvalidArgument, "etcd watch: empty key", false};
  }
  const auto until = deadline.at.value_or(EtcdClock::now() + kDefaultStartTimeout);
  auto attempt_timeout = options.attempt_timeout;
  if (attempt_timeout.count() <= 0) {
    const auto total =
        std::chrono::duration_cast<std::chrono::milliseconds>(until - EtcdClock::now());
    attempt_timeout = std::max(kMinAttempt, total / static_cast<int64_t>(endpoints.size()));
  }
  const std::string body = bj::serialize(EncodeCreate(options));
  std::string failures;
  auto note = [&](const std::string& message) {
    if (!failures.empty()) failures += "; ";
    failures += message;
  };
  size_t tried = 0;
  for (; tried < endpoints.size(); ++tried) {
    const auto now = EtcdClock::now();
    if (now >= until) break;
    const auto attempt_until = std::min(until, now + attempt_timeout);
    auto impl = std::make_unique<Impl>(endpoints[tried], options, callbacks);
    impl->resume = options.start_revision;
    auto status = impl->connection->StartStream(kWatchPath, body, attempt_until);
    if (!status.ok()) {
      if (status.error().code != Code::kUnavailable) return status.error();
      note(status.error().message);
      continue;
    }
    if (*status != 200) {
      // An error reply: read its (small) body for etcd's error.
      std::string text;
      bool ended = false;
      while (!ended && text.size() < kErrorBodyLimit) {
        auto more = impl->connection->ReadStream(text, attempt_until);
        if (!more.ok()) break;
        ended = !*more;
      }
      std::string message = impl->where + ": HTTP " + std::to_string(*status);
      auto parsed = json::ParseObject(text);
      std::optional<json::GatewayError> error;
      if (!Failed(parsed)) error = json::FindError(std::get<bj::object>(parsed));
      if (error) message += ": " + error->message;
      if ((error && json::GrpcCodeTriesNextEndpoint(error->grpc_code)) ||
          (!error && *status >= 500)) {
        note(message);
        continue;
      }
      return EtcdError{error ? json::CodeOfGrpc(error->grpc_code) : Code::kInternal,
                       std::move(message), false};
    }
    // The first message confirms the watch (or refuses it).
    auto first = impl->NextMessage(attempt_until);
    if (!first.ok()) {
      if (first.error().code != Code::kUnavailable) return first.error();
      note(first.error().message);
      continue;
    }
    bool created = false;
    if (auto broken = impl->Handle(*first, /*first=*/true, &created)) {
      if (broken->error.code != Code::kUnavailable) return broken->error;
      note(broken->error.message);
      continue;
    }
    Impl* raw = impl.get();
    raw->thread = std::thread([raw] { raw->Run(); });
    return std::unique_ptr<Watch>(new Watch(std::move(impl)));
  }
  std::string message;
  if (tried == endpoints.size()) {
    message = tried == 1
                  ? failures
                  : "etcd watch: all " + std::to_string(tried) + " endpoints failed: " + failures;
  } else {
    message = "etcd watch: the deadline passed after trying " + std::to_string(tried) + " of " +
              std::to_string(endpoints.size()) + " endpoints";
    if (!failures.empty()) message += ": " + failures;
  }
  return EtcdError{Code::kUnavailable, std::move(message), false};
}

// ---- WatchQueue ---------------------------------------------------------------------------

WatchCallbacks WatchQueue::callbacks() {
  return {[this](const std::vector<WatchEvent>& events) { PushEvents(events); },
          [this](const WatchBreak& why) { PushBreak(why); }};
}

void WatchQueue::PushEvents(const std::vector<WatchEvent>& events) {
  {
    MutexLock lock(&mu_);
    if (ended_) return;
    if (items_.size() >= capacity_) {
      ended_ = true;
      const int64_t first = events.empty() ? 0 : events.front().kv.mod_revision;
      items_.push_back({{},
                        WatchBreak{{Code::kResourceExhausted,
                                    "etcd watch: the queue is full (" + std::to_string(capacity_) +
                                        " batches); events from revision " + std::to_string(first) +
                                        " on were dropped",
                                    false},
                                   first,
                                   0}});
    } else {
      items_.push_back({events, std::nullopt});
    }
  }
  cv_.Signal();
}

void WatchQueue::PushBreak(const WatchBreak& why) {
  {
    MutexLock lock(&mu_);
    if (ended_) return;
    ended_ = true;
    items_.push_back({{}, why});
  }
  cv_.Signal();
}

std::optional<WatchQueue::Item> WatchQueue::Pop(EtcdClock::time_point deadline) {
  MutexLock lock(&mu_);
  while (items_.empty()) {
    if (!cv_.WaitUntil(&mu_, deadline)) break;
  }
  if (items_.empty()) return std::nullopt;
  Item item = std::move(items_.front());
  items_.pop_front();
  return item;
}

}  // namespace sundial::replication
