#include "bench/protocols.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <deque>
#include <vector>

#include "protocol/framing.h"
#include "protocol/sundial_generated.h"

namespace sundial::bench {
namespace {

namespace p = sundial::protocol;

// ---- Sundial ------------------------------------------------------------------------------

class SundialProtocol final : public Protocol {
 public:
  explicit SundialProtocol(ProtocolOptions options) : o_(std::move(options)) {}

  void Prepare(uint32_t slot, std::string* out) override {
    b_.Clear();
    const auto key =
        o_.exclusive ? b_.CreateString("key") : flatbuffers::Offset<flatbuffers::String>();
    p::QueueSettingsBuilder settings(b_);
    settings.add_type(o_.exclusive ? p::QueueType::exclusive : p::QueueType::simple);
    if (o_.exclusive) settings.add_exclusivity_key(key);
    settings.add_lease_ms(o_.lease_ms);
    if (o_.key_rate_per_s > 0) {
      settings.add_key_rate_per_s(o_.key_rate_per_s);
      settings.add_key_burst(o_.key_burst);
    }
    settings.add_retention_ms(0);  // completed messages go, as a ZREM or a delete does
    const auto settings_off = settings.Finish();
    const auto op = p::CreateCreateQueue(b_, b_.CreateString(o_.queue), settings_off);
    Finish(slot, p::Operation::CreateQueue, op.Union(), out);
  }

  void Setup(uint32_t, std::string_view, std::string*) override {}

  void Teardown(uint32_t slot, std::span<const std::string>, std::string* out) override {
    b_.Clear();
    const auto op = p::CreateDeleteQueue(b_, b_.CreateString(o_.queue));
    Finish(slot, p::Operation::DeleteQueue, op.Union(), out);
  }

  void Enqueue(uint32_t slot, std::span<const BenchMessage> messages, std::string* out) override {
    b_.Clear();
    items_.clear();
    for (const BenchMessage& m : messages) {
      pairs_.clear();
      if (!m.tenant.empty()) {
        pairs_.push_back(
            p::CreateMetadataPair(b_, b_.CreateString("tenant"), b_.CreateString(m.tenant)));
      }
      if (!m.exclusive.empty()) {
        pairs_.push_back(
            p::CreateMetadataPair(b_, b_.CreateString("key"), b_.CreateString(m.exclusive)));
      }
      const auto id = b_.CreateString(m.id);
      const auto payload =
          b_.CreateVector(reinterpret_cast<const uint8_t*>(m.payload.data()), m.payload.size());
      flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<p::MetadataPair>>> meta;
      if (!pairs_.empty()) meta = b_.CreateVector(pairs_);
      p::EnqueueItemBuilder item(b_);
      item.add_id(id);
      item.add_priority(m.priority);
      item.add_payload(payload);
      if (!pairs_.empty()) item.add_metadata(meta);
      items_.push_back(item.Finish());
    }
    const auto op = p::CreateEnqueue(b_, b_.CreateString(o_.queue), b_.CreateVector(items_));
    Finish(slot, p::Operation::Enqueue, op.Union(), out);
  }

  void Dequeue(uint32_t slot, uint32_t max, std::string_view tenant, std::string* out) override {
    b_.Clear();
    const auto op = DequeueTable(/*with_queue=*/true, max, tenant);
    Finish(slot, p::Operation::Dequeue, op.Union(), out);
  }

  void Complete(uint32_t slot, std::string_view, std::span<const Lease> leases,
                std::string* out) override {
    b_.Clear();
    const auto items = CompleteItems(leases);
    const auto op = p::CreateComplete(b_, b_.CreateString(o_.queue), items);
    Finish(slot, p::Operation::Complete, op.Union(), out);
  }

  void CompleteAndNext(uint32_t slot, std::string_view tenant, std::span<const Lease> leases,
                       uint32_t next_max, std::string* out) override {
    b_.Clear();
    const auto items = CompleteItems(leases);
    const auto next = DequeueTable(/*with_queue=*/false, next_max, tenant);  // this queue
    const auto op = p::CreateComplete(b_, b_.CreateString(o_.queue), items, next);
    Finish(slot, p::Operation::Complete, op.Union(), out);
  }

  int64_t Consume(std::string_view in, ReplySink* sink, std::string* error) override {
    size_t total = 0;
    for (;;) {
      std::string_view frame;
      size_t used = 0;
      const auto status = p::NextFrame(in.substr(total), p::kDefaultMaxFrameBytes, &frame, &used);
      if (status == p::FrameStatus::kIncomplete) return static_cast<int64_t>(total);
      if (status != p::FrameStatus::kComplete) {
        *error = "bad frame length from the server";
        return -1;
      }
      total += used;
      const auto* bytes = reinterpret_cast<const uint8_t*>(frame.data());
      flatbuffers::Verifier verifier(bytes, frame.size());
      if (!verifier.VerifyBuffer<p::ServerMessage>(nullptr)) {
        *error = "a frame that is not a ServerMessage";
        return -1;
      }
      const auto* r = flatbuffers::GetRoot<p::ServerMessage>(bytes)->body_as_Response();
      if (r == nullptr) continue;  // an event: not asked for
      if (r->request_id() == 0) {
        *error = "connection error: " + ErrorText(r->error());
        return -1;
      }
      const auto slot = static_cast<uint32_t>(r->request_id() & 0xffffffffu);
      if (r->error() != nullptr) {
        // A second CreateQueue of the same name (a rerun) is not an error for the bench.
        sink->Done(slot,
                   r->error()->code() == p::Code::ALREADY_EXISTS ? "" : ErrorText(r->error()));
        continue;
      }
      sink->Done(slot, ResultError(r, slot, sink));
    }
  }

 private:
  static std::string ErrorText(const p::Error* e) {
    if (e == nullptr) return "error";
    return std::string(p::EnumNameCode(e->code())) + ": " +
           (e->message() ? e->message()->str() : std::string());
  }

  static std::string StatusText(const p::ItemStatus* item) {
    return std::string(p::EnumNameCode(item->code())) + ": " +
           (item->message() ? item->message()->str() : std::string());
  }

  // Reports a dequeue's leases; returns the first item error of a batch ("" when none).
  static std::string ResultError(const p::Response* r, uint32_t slot, ReplySink* sink) {
    switch (r->result_type()) {
      case p::Result::DequeueResult:
        if (const auto* ms = r->result_as_DequeueResult()->messages()) {
          for (const p::Message* m : *ms) {
            sink->Leased(slot, m->id() ? m->id()->string_view() : "", m->lease_token());
          }
        }
        return "";
      case p::Result::EnqueueResults:
        if (const auto* items = r->result_as_EnqueueResults()->items()) {
          for (const p::EnqueueResult* item : *items) {
            if (item->error() != nullptr) return ErrorText(item->error());
          }
        }
        return "";
      case p::Result::ItemResults: {
        const p::ItemResults* results = r->result_as_ItemResults();
        if (const auto* next = results->next()) {  // a complete-and-next's leases
          for (const p::Message* m : *next) {
            sink->Leased(slot, m->id() ? m->id()->string_view() : "", m->lease_token());
          }
        }
        if (const auto* items = results->items()) {
          for (const p::ItemStatus* item : *items) {
            if (item->code() != p::Code::OK) return StatusText(item);
          }
        }
        if (results->next_error() != nullptr) return "next: " + StatusText(results->next_error());
        return "";
      }
      default:
        return "";
    }
  }

  // A Dequeue of up to `max`, filtered on `tenant` when there is one; without a queue it is a
  // Complete's `next` (the same queue).
  flatbuffers::Offset<p::Dequeue> DequeueTable(bool with_queue, uint32_t max,
                                               std::string_view tenant) {
    const auto queue = with_queue ? b_.CreateString(o_.queue) : 0;
    flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<p::MetadataPair>>> filter;
    if (!tenant.empty()) {
      pairs_.clear();
      pairs_.push_back(
          p::CreateMetadataPair(b_, b_.CreateString("tenant"), b_.CreateString(tenant)));
      filter = b_.CreateVector(pairs_);
    }
    p::DequeueBuilder d(b_);
    if (with_queue) d.add_queue(queue);
    d.add_max(max);
    d.add_lease_ms(o_.lease_ms);
    if (o_.dequeue_wait_ms > 0) d.add_wait_ms(o_.dequeue_wait_ms);
    if (!tenant.empty()) d.add_filter(filter);
    return d.Finish();
  }

  flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<p::CompleteItem>>> CompleteItems(
      std::span<const Lease> leases) {
    completes_.clear();
    for (const Lease& l : leases) {
      completes_.push_back(p::CreateCompleteItem(b_, b_.CreateString(l.id), l.token));
    }
    return b_.CreateVector(completes_);
  }

  void Finish(uint32_t slot, p::Operation type, flatbuffers::Offset<void> op, std::string* out) {
    const uint64_t request_id = (++sequence_ << 32) | slot;
    const auto request = p::CreateRequest(
        b_, request_id, o_.relaxed ? p::Durability::relaxed : p::Durability::durable, type, op);
    b_.Finish(request, p::RequestIdentifier());
    protocol::AppendFrame(
        std::string_view(reinterpret_cast<const char*>(b_.GetBufferPointer()), b_.GetSize()), out);
  }

  ProtocolOptions o_;
  flatbuffers::FlatBufferBuilder b_{4096};
  std::vector<flatbuffers::Offset<p::EnqueueItem>> items_;
  std::vector<flatbuffers::Offset<p::MetadataPair>> pairs_;
  std::vector<flatbuffers::Offset<p::CompleteItem>> completes_;
  uint64_t sequence_ = 0;
};

// ---- Redis --------------------------------------------------------------------------------

// The lease script of a sorted-set queue: the due members (score <= now) in score order, each
// pushed to now + lease so that it comes back if the worker dies (SQS's visibility timeout).
// Members after the third argument are removed first: the worker's "finish these, give me the
// next" in one call, one AOF write and one fsync, as a Redis user would script it.
constexpr std::string_view kLeaseScript =
    "if #ARGV > 3 then redis.call('ZREM', KEYS[1], unpack(ARGV, 4)) end\n"
    "local items = redis.call('ZRANGE', KEYS[1], '-inf', ARGV[1], 'BYSCORE', 'LIMIT', 0, ARGV[2])\n"
    "local deadline = tonumber(ARGV[1]) + tonumber(ARGV[3])\n"
    "for _, m in ipairs(items) do redis.call('ZADD', KEYS[1], 'XX', deadline, m) end\n"
    "return items\n";

class RedisProtocol final : public Protocol {
 public:
  explicit RedisProtocol(ProtocolOptions options)
      : o_(std::move(options)), reader_(redisReaderCreate()) {}
  ~RedisProtocol() override { redisReaderFree(reader_); }

  void Prepare(uint32_t slot, std::string* out) override {
    Command(slot, Kind::kPing, {"PING"}, out);
  }

  void Setup(uint32_t slot, std::string_view, std::string* out) override {
    Command(slot, Kind::kScriptLoad, {"SCRIPT", "LOAD", kLeaseScript}, out);
  }

  void Teardown(uint32_t slot, std::span<const std::string> tenants, std::string* out) override {
    args_.assign({"DEL", o_.queue});
    keys_.clear();
    for (const std::string& t : tenants) keys_.push_back(Key(t));
    for (const std::string& k : keys_) args_.push_back(k);
    Send(slot, Kind::kOther, out);
  }

  void Enqueue(uint32_t slot, std::span<const BenchMessage> messages, std::string* out) override {
    // One ZADD per key (messages of one request share a tenant in every workload but filter's
    // prefill, which enqueues one tenant per request too).
    const std::string key = Key(messages.empty() ? "" : messages[0].tenant);
    scores_.clear();
    members_.clear();
    for (const BenchMessage& m : messages) {
      scores_.push_back(std::to_string(m.priority));
      std::string member(m.id);
      member += '|';
      member += m.payload;
      members_.push_back(std::move(member));
    }
    args_.assign({"ZADD", key});
    for (size_t i = 0; i < messages.size(); ++i) {
      args_.push_back(scores_[i]);
      args_.push_back(members_[i]);
    }
    SendWrite(slot, Kind::kWrite, out);
  }

  void Dequeue(uint32_t slot, uint32_t max, std::string_view tenant, std::string* out) override {
    const std::string key = Key(tenant);
    const std::string now = std::to_string(NowMs());
    const std::string n = std::to_string(max);
    const std::string lease = std::to_string(o_.lease_ms);
    args_.assign({"EVALSHA", sha_, "1", key, now, n, lease});
    SendWrite(slot, Kind::kDequeue, out);
  }

  void Complete(uint32_t slot, std::string_view tenant, std::span<const Lease> leases,
                std::string* out) override {
    const std::string key = Key(tenant);
    args_.assign({"ZREM", key});
    for (const Lease& l : leases) args_.push_back(l.id);
    SendWrite(slot, Kind::kWrite, out);
  }

  void CompleteAndNext(uint32_t slot, std::string_view tenant, std::span<const Lease> leases,
                       uint32_t next_max, std::string* out) override {
    const std::string key = Key(tenant);
    const std::string now = std::to_string(NowMs());
    const std::string n = std::to_string(next_max);
    const std::string lease = std::to_string(o_.lease_ms);
    args_.assign({"EVALSHA", sha_, "1", key, now, n, lease});
    for (const Lease& l : leases) args_.push_back(l.id);
    SendWrite(slot, Kind::kDequeue, out);
  }

  int64_t Consume(std::string_view in, ReplySink* sink, std::string* error) override {
    if (redisReaderFeed(reader_, in.data(), in.size()) != REDIS_OK) {
      *error = "hiredis: cannot buffer the reply";
      return -1;
    }
    for (;;) {
      void* raw = nullptr;
      if (redisReaderGetReply(reader_, &raw) != REDIS_OK) {
        *error = std::string("hiredis: ") + reader_->errstr;
        return -1;
      }
      if (raw == nullptr) return static_cast<int64_t>(in.size());
      std::unique_ptr<redisReply, void (*)(void*)> reply(static_cast<redisReply*>(raw),
                                                         freeReplyObject);
      if (pending_.empty()) {
        *error = "a Redis reply nobody asked for";
        return -1;
      }
      const auto [slot, kind] = pending_.front();
      pending_.pop_front();
      if (kind == Kind::kWait) {  // the write before it is done now, or failed
        std::string failed = std::move(deferred_error_);
        deferred_error_.clear();
        if (failed.empty() && reply->type == REDIS_REPLY_ERROR) {
          failed = std::string("redis: ") + std::string(reply->str, reply->len);
        } else if (failed.empty() && reply->type == REDIS_REPLY_INTEGER &&
                   reply->integer < static_cast<long long>(o_.redis_wait)) {
          failed = "redis: WAIT: only " + std::to_string(reply->integer) + " replicas";
        }
        sink->Done(slot, failed);
        continue;
      }
      const bool waits = o_.redis_wait > 0 && (kind == Kind::kWrite || kind == Kind::kDequeue);
      if (reply->type == REDIS_REPLY_ERROR) {
        std::string failed = std::string("redis: ") + std::string(reply->str, reply->len);
        if (waits) {
          deferred_error_ = std::move(failed);
        } else {
          sink->Done(slot, failed);
        }
        continue;
      }
      if (kind == Kind::kScriptLoad && reply->type == REDIS_REPLY_STRING) {
        sha_.assign(reply->str, reply->len);
      } else if (kind == Kind::kDequeue && reply->type == REDIS_REPLY_ARRAY) {
        for (size_t i = 0; i < reply->elements; ++i) {
          const redisReply* e = reply->element[i];
          if (e->type == REDIS_REPLY_STRING)
            sink->Leased(slot, std::string_view(e->str, e->len), 0);
        }
      }
      if (!waits) sink->Done(slot, "");
    }
  }

 private:
  // kWrite and kDequeue are writes (followed by WAIT when redis_wait is set).
  enum class Kind : uint8_t { kOther, kScriptLoad, kDequeue, kPing, kWrite, kWait };

  void SendWrite(uint32_t slot, Kind kind, std::string* out) {
    Send(slot, kind, out);
    if (o_.redis_wait == 0) return;
    const std::string replicas = std::to_string(o_.redis_wait);
    args_.assign({"WAIT", replicas, "0"});
    Send(slot, Kind::kWait, out);
  }

  static int64_t NowMs() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }

  std::string Key(std::string_view tenant) const {
    if (tenant.empty()) return o_.queue;
    return o_.queue + ":" + std::string(tenant);
  }

  void Command(uint32_t slot, Kind kind, std::initializer_list<std::string_view> args,
               std::string* out) {
    args_.assign(args.begin(), args.end());
    Send(slot, kind, out);
  }

  void Send(uint32_t slot, Kind kind, std::string* out) {
    argv_.clear();
    lens_.clear();
    for (std::string_view a : args_) {
      argv_.push_back(a.data());
      lens_.push_back(a.size());
    }
    char* cmd = nullptr;
    const int n =
        redisFormatCommandArgv(&cmd, static_cast<int>(argv_.size()), argv_.data(), lens_.data());
    if (n > 0) out->append(cmd, static_cast<size_t>(n));
    redisFreeCommand(cmd);
    pending_.push_back({slot, kind});
  }

  ProtocolOptions o_;
  redisReader* reader_;
  std::string sha_;
  std::string deferred_error_;  // a write's error, reported when its WAIT answers
  std::deque<std::pair<uint32_t, Kind>> pending_;
  std::vector<std::string_view> args_;
  std::vector<const char*> argv_;
  std::vector<size_t> lens_;
  std::vector<std::string> scores_, members_, keys_;
};

// ---- beanstalkd ---------------------------------------------------------------------------

class BeanstalkProtocol final : public Protocol {
 public:
  explicit BeanstalkProtocol(ProtocolOptions options) : o_(std::move(options)) {}

  void Prepare(uint32_t slot, std::string* out) override {
    Line(slot, "use default\r\n", 1, out);  // a no-op with a reply
  }

  // Every connection watches the run's tube (or its tenant's) and nothing else, so runs never
  // see each other's jobs.
  void Setup(uint32_t slot, std::string_view tenant, std::string* out) override {
    const std::string tube = Tube(tenant);
    out->append("use " + tube + "\r\nwatch " + tube + "\r\nignore default\r\n");
    used_ = tube;
    pending_.push_back({slot, 3, {}});
  }

  void Teardown(uint32_t slot, std::span<const std::string>, std::string* out) override {
    Line(slot, "use default\r\n", 1, out);  // tubes go when no job and no client is left
    used_ = "default";
  }

  void Enqueue(uint32_t slot, std::span<const BenchMessage> messages, std::string* out) override {
    uint32_t replies = 0;
    for (const BenchMessage& m : messages) {
      const std::string tube = Tube(m.tenant);
      if (tube != used_) {
        out->append("use " + tube + "\r\n");
        used_ = tube;
        ++replies;
      }
      // put <pri> <delay> <ttr> <bytes>: beanstalkd's priority is a u32, lower first.
      *out += "put ";
      *out += std::to_string(static_cast<uint32_t>(m.priority));
      *out += " 0 ";
      *out += std::to_string(std::max<int64_t>(1, o_.lease_ms / 1000));
      *out += ' ';
      *out += std::to_string(m.payload.size());
      *out += "\r\n";
      *out += m.payload;
      *out += "\r\n";
      ++replies;
    }
    pending_.push_back({slot, replies, {}});
  }

  void Dequeue(uint32_t slot, uint32_t max, std::string_view, std::string* out) override {
    for (uint32_t i = 0; i < max; ++i) *out += "reserve-with-timeout 0\r\n";
    pending_.push_back({slot, max, {}});
  }

  void Complete(uint32_t slot, std::string_view, std::span<const Lease> leases,
                std::string* out) override {
    for (const Lease& l : leases) {
      *out += "delete ";
      *out += l.id;
      *out += "\r\n";
    }
    pending_.push_back({slot, static_cast<uint32_t>(leases.size()), {}});
  }

  // beanstalkd has no combined command: the deletes and then the reserves go in one write (one
  // round trip; with -f 0 the deletes are fsynced, the reserves are not logged).
  void CompleteAndNext(uint32_t slot, std::string_view, std::span<const Lease> leases,
                       uint32_t next_max, std::string* out) override {
    for (const Lease& l : leases) {
      *out += "delete ";
      *out += l.id;
      *out += "\r\n";
    }
    for (uint32_t i = 0; i < next_max; ++i) *out += "reserve-with-timeout 0\r\n";
    pending_.push_back({slot, static_cast<uint32_t>(leases.size()) + next_max, {}});
  }

  int64_t Consume(std::string_view in, ReplySink* sink, std::string* error) override {
    size_t pos = 0;
    for (;;) {
      const size_t eol = in.find("\r\n", pos);
      if (eol == std::string_view::npos) return static_cast<int64_t>(pos);
      const std::string_view line = in.substr(pos, eol - pos);
      size_t next = eol + 2;
      std::string_view job_id;
      if (line.starts_with("RESERVED ")) {
        // RESERVED <id> <bytes>\r\n<data>\r\n
        const std::string_view rest = line.substr(9);
        const size_t space = rest.find(' ');
        uint64_t bytes = 0;
        if (space == std::string_view::npos ||
            std::from_chars(rest.data() + space + 1, rest.data() + rest.size(), bytes).ec !=
                std::errc()) {
          *error = "beanstalkd: bad RESERVED line";
          return -1;
        }
        if (in.size() < next + bytes + 2) return static_cast<int64_t>(pos);  // body not here yet
        job_id = rest.substr(0, space);
        next += bytes + 2;
      }
      if (pending_.empty()) {
        *error = "a beanstalkd reply nobody asked for";
        return -1;
      }
      Pending& head = pending_.front();
      if (!job_id.empty()) {
        sink->Leased(head.slot, job_id, 0);
      } else if (!IsSuccess(line) && head.error.empty()) {
        head.error = "beanstalkd: " + std::string(line);
      }
      pos = next;
      if (--head.replies == 0) {
        const Pending done = std::move(head);
        pending_.pop_front();
        sink->Done(done.slot, done.error);
      }
    }
  }

 private:
  struct Pending {
    uint32_t slot;
    uint32_t replies;
    std::string error;
  };

  static bool IsSuccess(std::string_view line) {
    return line.starts_with("INSERTED ") || line == "DELETED" || line == "TIMED_OUT" ||
           line.starts_with("USING ") || line.starts_with("WATCHING ");
  }

  std::string Tube(std::string_view tenant) const {
    if (tenant.empty()) return o_.queue;
    return o_.queue + "." + std::string(tenant);
  }

  void Line(uint32_t slot, std::string_view line, uint32_t replies, std::string* out) {
    out->append(line);
    pending_.push_back({slot, replies, {}});
  }

  ProtocolOptions o_;
  std::string used_ = "default";
  std::deque<Pending> pending_;
};

// Sundial's HTTP JSON API (docs/http-api.md): each operation a POST /v1/<Operation> whose body is
// a whole Request in the JSON form, over keep-alive; answers come in order (HTTP/1.1).
class HttpProtocol final : public Protocol {
 public:
  HttpProtocol(ProtocolOptions options, std::string host)
      : o_(std::move(options)), host_(std::move(host)) {}

  void Prepare(uint32_t slot, std::string* out) override {
    std::string settings = R"({"lease_ms":)" + std::to_string(o_.lease_ms) + R"(,"retention_ms":0)";
    if (o_.exclusive) settings += R"(,"type":"exclusive","exclusivity_key":"key")";
    settings += "}";
    Post(slot, false, "CreateQueue",
         R"({"name":)" + Quoted(o_.queue) + R"(,"settings":)" + settings + "}", out);
  }
  void Setup(uint32_t, std::string_view, std::string*) override {}
  void Teardown(uint32_t slot, std::span<const std::string>, std::string* out) override {
    Post(slot, false, "DeleteQueue", R"({"name":)" + Quoted(o_.queue) + "}", out);
  }

  void Enqueue(uint32_t slot, std::span<const BenchMessage> messages, std::string* out) override {
    std::string op = R"({"queue":)" + Quoted(o_.queue) + R"(,"items":[)";
    bool first = true;
    for (const BenchMessage& m : messages) {
      if (!first) op += ',';
      first = false;
      op += R"({"id":)" + Quoted(m.id) + R"(,"priority":)" + std::to_string(m.priority) +
            R"(,"payload":[)";
      for (size_t i = 0; i < m.payload.size(); ++i) {
        if (i > 0) op += ',';
        op += std::to_string(static_cast<unsigned char>(m.payload[i]));
      }
      op += "]";
      std::string pairs;
      if (!m.tenant.empty()) pairs += R"({"key":"tenant","value":)" + Quoted(m.tenant) + "}";
      if (!m.exclusive.empty()) {
        if (!pairs.empty()) pairs += ',';
        pairs += R"({"key":"key","value":)" + Quoted(m.exclusive) + "}";
      }
      if (!pairs.empty()) op += R"(,"metadata":[)" + pairs + "]";
      op += "}";
    }
    op += "]}";
    Post(slot, false, "Enqueue", op, out);
  }

  void Dequeue(uint32_t slot, uint32_t max, std::string_view tenant, std::string* out) override {
    std::string op = R"({"queue":)" + Quoted(o_.queue) + R"(,"max":)" + std::to_string(max);
    if (!tenant.empty()) op += R"(,"filter":[{"key":"tenant","value":)" + Quoted(tenant) + "}]";
    op += "}";
    Post(slot, true, "Dequeue", op, out);
  }

  void Complete(uint32_t slot, std::string_view, std::span<const Lease> leases,
                std::string* out) override {
    Post(slot, false, "Complete", CompleteFields(leases) + "}", out);
  }

  void CompleteAndNext(uint32_t slot, std::string_view tenant, std::span<const Lease> leases,
                       uint32_t next_max, std::string* out) override {
    std::string op = CompleteFields(leases) + R"(,"next":{"max":)" + std::to_string(next_max);
    if (!tenant.empty()) op += R"(,"filter":[{"key":"tenant","value":)" + Quoted(tenant) + "}]";
    op += "}}";
    Post(slot, true, "Complete", op, out);  // ItemResults.next's messages, parsed as leases
  }

  int64_t Consume(std::string_view in, ReplySink* sink, std::string* error) override {
    size_t used = 0;
    while (true) {
      const std::string_view rest = in.substr(used);
      const size_t head_end = rest.find("\r\n\r\n");
      if (head_end == std::string_view::npos) break;
      const std::string_view head = rest.substr(0, head_end);
      if (!head.starts_with("HTTP/1.1 ") || head.size() < 12) {
        *error = "not an HTTP/1.1 response";
        return -1;
      }
      const int status = std::atoi(std::string(head.substr(9, 3)).c_str());
      const size_t cl = head.find("Content-Length: ");
      if (cl == std::string_view::npos) {
        *error = "an HTTP response without Content-Length";
        return -1;
      }
      const size_t length =
          std::strtoul(std::string(head.substr(cl + 16, 12)).c_str(), nullptr, 10);
      if (rest.size() < head_end + 4 + length) break;
      const std::string_view body = rest.substr(head_end + 4, length);
      used += head_end + 4 + length;
      if (pending_.empty()) {
        *error = "a response to no request";
        return -1;
      }
      const auto [slot, dequeue] = pending_.front();
      pending_.pop_front();
      if (status != 200) {
        sink->Done(slot, body);
        continue;
      }
      if (dequeue) {
        // "id": "…" then "lease_token": N, in each message of the DequeueResult.
        size_t at = 0;
        while ((at = body.find(R"("id": ")", at)) != std::string_view::npos) {
          at += 7;
          const std::string_view id = body.substr(at, body.find('"', at) - at);
          const size_t token_at = body.find(R"("lease_token": )", at);
          if (token_at == std::string_view::npos) break;
          const uint64_t token = std::strtoull(body.data() + token_at + 15, nullptr, 10);
          sink->Leased(slot, id, token);
          at = token_at;
        }
      }
      sink->Done(slot, "");
    }
    return static_cast<int64_t>(used);
  }

 private:
  static std::string Quoted(std::string_view s) {  // bench ids, queues and tenants: no escapes
    return "\"" + std::string(s) + "\"";
  }

  // A Complete's object without its closing brace: the queue and the items.
  std::string CompleteFields(std::span<const Lease> leases) const {
    std::string op = R"({"queue":)" + Quoted(o_.queue) + R"(,"items":[)";
    bool first = true;
    for (const Lease& l : leases) {
      if (!first) op += ',';
      first = false;
      op += R"({"id":)" + Quoted(l.id) + R"(,"lease_token":)" + std::to_string(l.token) + "}";
    }
    return op + "]";
  }

  void Post(uint32_t slot, bool dequeue, std::string_view operation, const std::string& op,
            std::string* out) {
    body_ = R"({"op_type":")" + std::string(operation) + R"(","op":)" + op;
    if (o_.relaxed) body_ += R"(,"durability":"relaxed")";
    body_ += "}";
    *out += "POST /v1/";
    *out += operation;
    *out += " HTTP/1.1\r\nHost: ";
    *out += host_;
    *out += "\r\nContent-Type: application/json\r\nContent-Length: ";
    *out += std::to_string(body_.size());
    *out += "\r\n\r\n";
    *out += body_;
    pending_.push_back({slot, dequeue});
  }

  ProtocolOptions o_;
  std::string host_;
  std::string body_;
  std::deque<std::pair<uint32_t, bool>> pending_;  // slot, is a dequeue
};

}  // namespace

std::unique_ptr<Protocol> MakeProtocol(Target target, const ProtocolOptions& options) {
  switch (target) {
    case Target::kSundial:
      return std::make_unique<SundialProtocol>(options);
    case Target::kRedis:
      return std::make_unique<RedisProtocol>(options);
    case Target::kBeanstalk:
      return std::make_unique<BeanstalkProtocol>(options);
    case Target::kHttp:
      return std::make_unique<HttpProtocol>(options, "sundiald");
  }
  return nullptr;
}

}  // namespace sundial::bench
