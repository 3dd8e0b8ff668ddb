// sundial: the command-line client of sundiald (docs/cli.md).
//
//   sundial [--addr host:port[,host:port...]] [--token-file F] [--tls [--ca-file F]] SUBCOMMAND
//           ARGS...
//
// Several addresses are the nodes of one cluster: the client follows its primary and retries
// across a failover (client/client.h, docs/cli.md "Clusters").
//
// One JSON object per line on stdout (tools/reply_json.h). Exit codes: 0 success, 1 an error
// from the server ({"code","message"} on stderr), 2 bad usage (CLI11's message), 3 the server
// cannot be reached.
#include <CLI/CLI.hpp>
#include <boost/json/array.hpp>
#include <boost/json/serialize.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "client/client.h"
#include "client/watch.h"
#include "tools/flow_json.h"
#include "tools/reply_json.h"

namespace sundial::tools {
namespace {

namespace json = boost::json;
namespace p = protocol;
using client::Error;
using client::Reply;

constexpr int kExitOk = 0;
constexpr int kExitServerError = 1;
constexpr int kExitUsage = 2;
constexpr int kExitUnreachable = 3;

// ---- Output ------------------------------------------------------------------------------

void PrintLine(std::FILE* out, const json::object& o) {
  const std::string line = json::serialize(o);
  std::fwrite(line.data(), 1, line.size(), out);
  std::fputc('\n', out);
}

void Print(const json::object& o) { PrintLine(stdout, o); }

// Prints the error on stderr; the exit code for it.
int Failed(const Error& error) {
  std::fflush(stdout);
  PrintLine(stderr, ErrorToJson(error));
  return error.unreachable() ? kExitUnreachable : kExitServerError;
}

// A per-item error of a batch: {"id", "code", "message"} on stderr.
void PrintItemError(std::string_view id, p::Code code, const flatbuffers::String* message) {
  json::object o;
  o["id"] = id;
  o["code"] = CodeName(static_cast<Code>(code));
  o["message"] = message ? message->string_view() : std::string_view();
  PrintLine(stderr, o);
}

int UsageError(const std::string& message) {
  std::fprintf(stderr, "%s\nRun with --help for more information.\n", message.c_str());
  return kExitUsage;
}

// Calls `print` with the reply's result table of type T.
template <typename T, typename PrintResult>
int Expect(const client::Result<Reply>& reply, const PrintResult& print) {
  if (!reply.ok()) return Failed(reply.error());
  const T* result = reply->result<T>();
  if (result == nullptr) {
    return Failed(Error::Connection(
        Code::kInternal, std::string("protocol: the server answered with ") +
                             p::EnumNameResult(reply->result_type()) + ", not the expected " +
                             p::EnumNameResult(p::ResultTraits<T>::enum_value)));
  }
  return print(*result);
}

int PrintCount(const client::Result<Reply>& reply, const char* field) {
  return Expect<p::Counted>(reply, [field](const p::Counted& c) {
    json::object o;
    o[field] = c.count();
    Print(o);
    return kExitOk;
  });
}

int PrintQueue(const client::Result<Reply>& reply) {
  return Expect<p::QueueResult>(reply, [](const p::QueueResult& r) {
    if (r.queue() == nullptr) return Failed(Error::Connection(Code::kInternal, "no queue"));
    Print(QueueToJson(*r.queue()));
    return kExitOk;
  });
}

// One line per item of ItemResults: {"id", "state": ok_state} on stdout, or the item's error
// on stderr. Exit 1 if any item failed.
int PrintItems(const client::Result<Reply>& reply, const std::vector<std::string>& ids,
               const char* ok_state) {
  return Expect<p::ItemResults>(reply, [&](const p::ItemResults& r) {
    int exit_code = kExitOk;
    const size_t n = r.items() ? r.items()->size() : 0;
    if (n != ids.size()) {
      return Failed(Error::Connection(Code::kInternal, "protocol: " + std::to_string(n) +
                                                           " item results for " +
                                                           std::to_string(ids.size()) + " ids"));
    }
    for (size_t i = 0; i < n; ++i) {
      const p::ItemStatus* item = r.items()->Get(i);
      if (item->code() == p::Code::OK) {
        json::object o;
        o["id"] = ids[i];
        o["state"] = ok_state;
        Print(o);
      } else {
        std::fflush(stdout);
        PrintItemError(ids[i], item->code(), item->message());
        exit_code = kExitServerError;
      }
    }
    return exit_code;
  });
}

// ---- Arguments ---------------------------------------------------------------------------

// "k=v" into a pair; a CLI11 check that refuses anything else.
std::pair<std::string, std::string> SplitPair(const std::string& text) {
  const size_t eq = text.find('=');
  return {text.substr(0, eq), text.substr(eq + 1)};
}
const CLI::Validator kKeyValue(
    [](std::string& text) -> std::string {
      const size_t eq = text.find('=');
      if (eq == std::string::npos || eq == 0) return "expected KEY=VALUE, got '" + text + "'";
      return {};
    },
    "KEY=VALUE");

client::Pairs ToPairs(const std::vector<std::string>& texts) {
  client::Pairs out;
  out.reserve(texts.size());
  for (const std::string& t : texts) out.push_back(SplitPair(t));
  return out;
}

// In the order of the schema's MessageState values.
const std::vector<std::string> kStateNames{"invisible", "pending", "running", "completed",
                                           "canceled",  "errored", "waiting"};

// on_dependency_failure's values, as the schema names them.
std::vector<std::string> PolicyNames() {
  std::vector<std::string> out;
  for (const auto policy : p::EnumValuesDependencyFailurePolicy()) {
    out.emplace_back(p::EnumNameDependencyFailurePolicy(policy));
  }
  return out;
}

p::MessageState ToState(const std::string& name) {
  for (size_t i = 0; i < kStateNames.size(); ++i) {
    if (kStateNames[i] == name) return static_cast<p::MessageState>(i);
  }
  return p::MessageState::pending;  // unreachable: CLI11 checked the name
}

// Reads a whole file ("-": standard input). False when it cannot be read.
bool ReadFile(const std::string& path, std::string* out) {
  if (path == "-") {
    out->assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    return !std::cin.bad();
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  out->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return !in.bad();
}

// The queue settings flags of create-queue and update-queue (the settings' names in
// docs/semantics.md, with dashes). Only the flags given are sent: a queue created without one
// gets the server's default, an update leaves the setting as it is.
struct SettingFlags {
  int64_t lease_ms = 0;
  int64_t invisibility_ms = 0;
  uint32_t max_attempts = 0;
  int64_t retry_backoff_ms = 0;
  int64_t retry_backoff_max_ms = 0;
  std::string dead_letter_queue;
  int64_t retention_ms = 0;
  uint64_t max_depth = 0;
  bool enqueue_paused = false;
  bool dequeue_paused = false;
  uint32_t history_max = 0;
  uint32_t key_concurrency = 0;
  int64_t ttl_ms = 0;
  std::string dedupe;
  double rate_per_s = 0;
  uint32_t burst = 0;
  double key_rate_per_s = 0;
  uint32_t key_burst = 0;
  std::string fairness;
  int64_t overdue_first_ms = 0;
  CLI::Option* lease_ms_flag = nullptr;
  CLI::Option* invisibility_ms_flag = nullptr;
  CLI::Option* max_attempts_flag = nullptr;
  CLI::Option* retry_backoff_ms_flag = nullptr;
  CLI::Option* retry_backoff_max_ms_flag = nullptr;
  CLI::Option* dead_letter_queue_flag = nullptr;
  CLI::Option* retention_ms_flag = nullptr;
  CLI::Option* max_depth_flag = nullptr;
  CLI::Option* enqueue_paused_flag = nullptr;
  CLI::Option* dequeue_paused_flag = nullptr;
  CLI::Option* history_max_flag = nullptr;
  CLI::Option* key_concurrency_flag = nullptr;
  CLI::Option* ttl_ms_flag = nullptr;
  CLI::Option* dedupe_flag = nullptr;
  CLI::Option* rate_per_s_flag = nullptr;
  CLI::Option* burst_flag = nullptr;
  CLI::Option* key_rate_per_s_flag = nullptr;
  CLI::Option* key_burst_flag = nullptr;
  CLI::Option* fairness_flag = nullptr;
  CLI::Option* overdue_first_ms_flag = nullptr;

  void AddTo(CLI::App* cmd) {
    lease_ms_flag = cmd->add_option("--lease-ms", lease_ms, "default lease length (ms)");
    invisibility_ms_flag =
        cmd->add_option("--invisibility-ms", invisibility_ms, "default enqueue delay (ms)");
    max_attempts_flag = cmd->add_option("--max-attempts", max_attempts,
                                        "dequeues a message may receive before it is errored");
    retry_backoff_ms_flag = cmd->add_option("--retry-backoff-ms", retry_backoff_ms,
                                            "base delay after fail (ms), doubled per attempt");
    retry_backoff_max_ms_flag =
        cmd->add_option("--retry-backoff-max-ms", retry_backoff_max_ms, "cap of that delay");
    dead_letter_queue_flag = cmd->add_option("--dead-letter-queue", dead_letter_queue,
                                             "queue that receives errored messages ('' for none)");
    retention_ms_flag = cmd->add_option("--retention-ms", retention_ms,
                                        "how long terminal messages stay readable (ms)");
    max_depth_flag =
        cmd->add_option("--max-depth", max_depth, "non-terminal messages allowed (0: no limit)");
    enqueue_paused_flag = cmd->add_option("--enqueue-paused", enqueue_paused, "true|false");
    dequeue_paused_flag = cmd->add_option("--dequeue-paused", dequeue_paused, "true|false");
    history_max_flag = cmd->add_option("--history-max", history_max,
                                       "history entries kept per message (0: no history)");
    key_concurrency_flag =
        cmd->add_option("--key-concurrency", key_concurrency,
                        "messages per flow-key value running at once (0: no limit)");
    ttl_ms_flag = cmd->add_option("--ttl-ms", ttl_ms,
                                  "a message's default time to live from its enqueue (0: none)");
    dedupe_flag = cmd->add_option("--dedupe", dedupe,
                                  "keep|while_active: whether an enqueue releases a terminal "
                                  "message's id")
                      ->check(CLI::IsMember({"keep", "while_active"}));
    rate_per_s_flag = cmd->add_option("--rate-per-s", rate_per_s,
                                      "dequeues per second for the whole queue (0: no limit)");
    burst_flag = cmd->add_option("--burst", burst, "the queue's bucket size (default 1)");
    key_rate_per_s_flag = cmd->add_option("--key-rate-per-s", key_rate_per_s,
                                          "dequeues per second per flow-key value (0: no limit)");
    key_burst_flag =
        cmd->add_option("--key-burst", key_burst, "each flow-key value's bucket size (default 1)");
    fairness_flag = cmd->add_option("--fairness", fairness,
                                    "none|weighted: weighted round robin over the flow key")
                        ->check(CLI::IsMember({"none", "weighted"}));
    overdue_first_ms_flag =
        cmd->add_option("--overdue-first-ms", overdue_first_ms,
                        "weighted: a message overdue by more than this jumps the turns (0: never)");
  }

  // Sets in `out` each setting whose flag was given.
  template <class Settings>
  void Given(Settings& out) const {
    if (lease_ms_flag->count()) out.lease_ms = lease_ms;
    if (invisibility_ms_flag->count()) out.invisibility_ms = invisibility_ms;
    if (max_attempts_flag->count()) out.max_attempts = max_attempts;
    if (retry_backoff_ms_flag->count()) out.retry_backoff_ms = retry_backoff_ms;
    if (retry_backoff_max_ms_flag->count()) out.retry_backoff_max_ms = retry_backoff_max_ms;
    if (dead_letter_queue_flag->count()) out.dead_letter_queue = dead_letter_queue;
    if (retention_ms_flag->count()) out.retention_ms = retention_ms;
    if (max_depth_flag->count()) out.max_depth = max_depth;
    if (enqueue_paused_flag->count()) out.enqueue_paused = enqueue_paused;
    if (dequeue_paused_flag->count()) out.dequeue_paused = dequeue_paused;
    if (history_max_flag->count()) out.history_max = history_max;
    if (key_concurrency_flag->count()) out.key_concurrency = key_concurrency;
    if (ttl_ms_flag->count()) out.ttl_ms = ttl_ms;
    if (dedupe_flag->count()) {
      out.dedupe = dedupe == "while_active" ? p::Dedupe::while_active : p::Dedupe::keep;
    }
    if (rate_per_s_flag->count()) out.rate_per_s = rate_per_s;
    if (burst_flag->count()) out.burst = burst;
    if (key_rate_per_s_flag->count()) out.key_rate_per_s = key_rate_per_s;
    if (key_burst_flag->count()) out.key_burst = key_burst;
    if (fairness_flag->count()) {
      out.fairness = fairness == "weighted" ? p::Fairness::weighted : p::Fairness::none;
    }
    if (overdue_first_ms_flag->count()) out.overdue_first_ms = overdue_first_ms;
  }
};

// Everything the subcommands read; each binds the fields it uses.
struct Args {
  // Global.
  std::string addr = "127.0.0.1:7400";
  std::string http_addr;
  std::string token_file;
  bool tls = false;
  std::string ca_file;
  std::string durability = "durable";
  int timeout_ms = client::kDefaultTimeoutMs;

  std::string queue;
  std::string id;
  std::vector<std::string> ids;
  uint64_t lease_token = 0;
  std::vector<std::string> filters;
  std::vector<std::string> states;
  std::string state;
  bool all = false;

  std::string type;  // empty: not sent (a simple queue)
  std::string exclusivity_key;
  std::string flow_key;
  SettingFlags create_settings;
  SettingFlags update_settings;

  int64_t priority = 0;
  std::string payload;
  std::string payload_file;
  std::vector<std::string> meta;
  int64_t delay_ms = 0;
  int64_t visible_at = 0;
  uint32_t max_attempts = 0;
  CLI::Option* enqueue_delay = nullptr;
  CLI::Option* enqueue_visible_at = nullptr;
  CLI::Option* enqueue_max_attempts = nullptr;
  int64_t ttl_ms = 0;
  int64_t debounce_ms = 0;
  CLI::Option* enqueue_ttl = nullptr;
  CLI::Option* enqueue_debounce = nullptr;
  std::vector<std::string> depends_on;
  std::string on_dependency_failure;  // empty: not sent (cancel)
  bool include_dependency_results = false;
  std::string batch;      // enqueue --batch
  std::string worker_id;  // dequeue, complete --next: --worker-id
  std::string note;       // note's text
  // set-key-limits, get-key-limits, list-keys
  std::string key_value;
  uint32_t key_concurrency = 0;
  double key_rate_per_s = 0;
  uint32_t key_burst = 1;
  uint32_t key_weight = 1;
  CLI::Option* key_concurrency_flag = nullptr;
  CLI::Option* key_rate_flag = nullptr;
  CLI::Option* key_burst_flag = nullptr;
  CLI::Option* key_weight_flag = nullptr;
  std::string key_order = "pending";
  uint32_t key_limit = 20;
  std::string flow_file;  // enqueue-flow --file

  // batch create
  std::string callback_queue;
  std::string callback_id;
  int64_t retention_ms = 0;
  CLI::Option* batch_retention = nullptr;
  CLI::Option* batch_max_attempts = nullptr;

  uint32_t max = 1;
  int64_t lease_ms = 0;
  uint32_t wait_ms = 0;
  std::string result;
  std::string result_file;

  CLI::Option* dequeue_lease = nullptr;
  CLI::Option* complete_lease = nullptr;
  bool next = false;  // complete --next

  std::string error;
  int64_t retry_delay_ms = 0;
  CLI::Option* retry_delay = nullptr;

  CLI::Option* reprioritize_priority = nullptr;
  CLI::Option* reprioritize_visible_at = nullptr;

  uint32_t limit = 100;
  std::string cursor;

  bool table = false;  // cluster status
  std::string to;      // cluster switchover

  std::string name;  // schedule
  std::string cron;
  std::string tz;
  int64_t every_ms = 0;
  int64_t priority_offset_ms = 0;
  std::string misfire = "skip";
  std::string overlap = "allow";
};

using Runner = std::function<int(client::Client&)>;

// A subcommand and what it does with a connected client (watch connects by itself).
struct Subcommand {
  CLI::App* app;
  Runner run;
};

// ---- Subcommands -------------------------------------------------------------------------

int PrintSchedule(const client::Result<Reply>& reply) {
  return Expect<p::ScheduleResult>(reply, [](const p::ScheduleResult& r) {
    if (r.schedule() == nullptr) return Failed(Error::Connection(Code::kInternal, "no schedule"));
    json::object o = ScheduleToJson(*r.schedule());
    o["created"] = r.created();
    Print(o);
    return kExitOk;
  });
}

// sundial schedule upsert|get|list|delete|pause|resume|trigger (docs/cli.md, "Schedules").
void AddScheduleSubcommands(CLI::App& app, Args& a, std::vector<Subcommand>& out) {
  CLI::App* schedule = app.add_subcommand("schedule", "Server-held schedules: cron or every_ms.");
  schedule->require_subcommand(1);

  CLI::App* upsert = schedule->add_subcommand(
      "upsert", "Create or replace a schedule; each fire at T enqueues the message NAME@T.");
  upsert->add_option("queue", a.queue, "queue name")->required();
  upsert->add_option("name", a.name, "schedule name")->required();
  CLI::Option* cron = upsert->add_option("--cron", a.cron, "5 fields or a macro (@daily, ...)");
  CLI::Option* every = upsert->add_option("--every-ms", a.every_ms, "fire every N ms");
  cron->excludes(every);
  upsert->add_option("--tz", a.tz, "IANA time zone of --cron (default UTC)")->needs(cron);
  upsert->add_option("--payload", a.payload, "the message's payload text");
  upsert->add_option("--payload-file", a.payload_file, "read the payload from a file");
  upsert->add_option("--meta", a.meta, "metadata pair (repeatable)")->check(kKeyValue);
  upsert->add_option("--priority-offset-ms", a.priority_offset_ms,
                     "the fire at T gets priority T + this (its deadline)");
  upsert->add_option("--max-attempts", a.max_attempts, "0: the queue's default");
  upsert->add_option("--misfire", a.misfire, "fires missed while down: skip|one|all")
      ->check(CLI::IsMember({"skip", "one", "all"}))
      ->capture_default_str();
  upsert->add_option("--overlap", a.overlap, "allow|skip_if_active")
      ->check(CLI::IsMember({"allow", "skip_if_active"}))
      ->capture_default_str();
  out.push_back({upsert, [&a, cron, every](client::Client& c) {
                   if (cron->count() + every->count() != 1) {
                     return UsageError("schedule upsert: give --cron or --every-ms");
                   }
                   client::ScheduleTemplate t;
                   t.cron = a.cron;
                   t.tz = a.tz;
                   t.every_ms = a.every_ms;
                   t.payload = a.payload;
                   t.metadata = ToPairs(a.meta);
                   t.priority_offset_ms = a.priority_offset_ms;
                   t.max_attempts = a.max_attempts;
                   p::MisfirePolicy misfire = p::MisfirePolicy::skip;
                   for (auto m : p::EnumValuesMisfirePolicy()) {
                     if (a.misfire == p::EnumNameMisfirePolicy(m)) misfire = m;
                   }
                   t.misfire = misfire;
                   t.overlap = a.overlap == "skip_if_active" ? p::OverlapPolicy::skip_if_active
                                                             : p::OverlapPolicy::allow;
                   return PrintSchedule(c.UpsertSchedule(a.queue, a.name, t));
                 }});

  const auto named = [&](const char* verb, const char* help) {
    CLI::App* cmd = schedule->add_subcommand(verb, help);
    cmd->add_option("queue", a.queue, "queue name")->required();
    cmd->add_option("name", a.name, "schedule name")->required();
    return cmd;
  };
  out.push_back(
      {named("get", "A schedule, its next and last fires and its counts."),
       [&a](client::Client& c) { return PrintSchedule(c.GetSchedule(a.queue, a.name)); }});
  out.push_back(
      {named("pause", "Stop a schedule's fires until it is resumed."),
       [&a](client::Client& c) { return PrintSchedule(c.PauseSchedule(a.queue, a.name)); }});
  out.push_back(
      {named("resume", "Fire again, from now on (fires while paused are not made)."),
       [&a](client::Client& c) { return PrintSchedule(c.ResumeSchedule(a.queue, a.name)); }});
  out.push_back(
      {named("delete", "Delete a schedule (the messages it made stay)."), [&a](client::Client& c) {
         return Expect<p::Done>(c.DeleteSchedule(a.queue, a.name), [&a](const p::Done&) {
           json::object o;
           o["queue"] = a.queue;
           o["name"] = a.name;
           o["deleted"] = true;
           Print(o);
           return kExitOk;
         });
       }});
  out.push_back(
      {named("trigger", "Fire now: enqueues NAME@now, paused or not."), [&a](client::Client& c) {
         return Expect<p::TriggerResult>(
             c.TriggerSchedule(a.queue, a.name), [](const p::TriggerResult& r) {
               json::object o;
               o["id"] = r.id() ? r.id()->string_view() : std::string_view();
               o["fire_at"] = r.fire_at();
               o["duplicate"] = r.duplicate();
               Print(o);
               return kExitOk;
             });
       }});

  CLI::App* list = schedule->add_subcommand("list", "Every schedule (of QUEUE), one per line.");
  list->add_option("queue", a.queue, "queue name (default: every queue)");
  out.push_back({list, [&a](client::Client& c) {
                   return Expect<p::ScheduleList>(c.ListSchedules(a.queue),
                                                  [](const p::ScheduleList& r) {
                                                    if (r.schedules()) {
                                                      for (const p::Schedule* s : *r.schedules())
                                                        Print(ScheduleToJson(*s));
                                                    }
                                                    return kExitOk;
                                                  });
                 }});
}

void AddQueueSubcommands(CLI::App& app, Args& a, std::vector<Subcommand>& out) {
  CLI::App* create = app.add_subcommand("create-queue", "Create a queue (or confirm it).");
  create->add_option("queue", a.queue, "queue name")->required();
  create->add_option("--type", a.type, "simple|exclusive")
      ->check(CLI::IsMember({"simple", "exclusive"}));
  create->add_option("--exclusivity-key", a.exclusivity_key,
                     "exclusive queues: the metadata key whose value is exclusive");
  create->add_option("--flow-key", a.flow_key,
                     "the metadata key whose values --key-concurrency limits (fixed)");
  a.create_settings.AddTo(create);
  out.push_back({create, [&a](client::Client& c) {
                   client::QueueSettings s;
                   a.create_settings.Given(s);
                   if (!a.type.empty()) {
                     s.type =
                         a.type == "exclusive" ? p::QueueType::exclusive : p::QueueType::simple;
                   }
                   s.exclusivity_key = a.exclusivity_key;
                   s.flow_key = a.flow_key;
                   return PrintQueue(c.CreateQueue(a.queue, s));
                 }});

  CLI::App* update = app.add_subcommand("update-queue", "Change a queue's settings.");
  update->add_option("queue", a.queue, "queue name")->required();
  a.update_settings.AddTo(update);
  out.push_back({update, [&a](client::Client& c) {
                   client::QueueSettingsUpdate u;
                   a.update_settings.Given(u);
                   return PrintQueue(c.UpdateQueue(a.queue, u));
                 }});

  CLI::App* get = app.add_subcommand("get-queue", "A queue's settings and counts.");
  get->add_option("queue", a.queue, "queue name")->required();
  out.push_back({get, [&a](client::Client& c) { return PrintQueue(c.GetQueue(a.queue)); }});

  CLI::App* list = app.add_subcommand("list-queues", "Every queue, one per line.");
  out.push_back({list, [](client::Client& c) {
                   return Expect<p::QueueList>(c.ListQueues(), [](const p::QueueList& r) {
                     if (r.queues()) {
                       for (const p::QueueInfo* q : *r.queues()) Print(QueueToJson(*q));
                     }
                     return kExitOk;
                   });
                 }});

  CLI::App* del = app.add_subcommand("delete-queue", "Delete a queue and all its messages.");
  del->add_option("queue", a.queue, "queue name")->required();
  out.push_back({del, [&a](client::Client& c) {
                   return Expect<p::Done>(c.DeleteQueue(a.queue), [&a](const p::Done&) {
                     json::object o;
                     o["name"] = a.queue;
                     o["deleted"] = true;
                     Print(o);
                     return kExitOk;
                   });
                 }});

  CLI::App* purge = app.add_subcommand("purge-queue", "Remove the messages in some states.");
  purge->add_option("queue", a.queue, "queue name")->required();
  purge->add_option("--state", a.states, "states to purge (one or more)")
      ->required()
      ->check(CLI::IsMember(kStateNames));
  out.push_back({purge, [&a](client::Client& c) {
                   std::vector<p::MessageState> states;
                   for (const std::string& s : a.states) states.push_back(ToState(s));
                   return PrintCount(c.PurgeQueue(a.queue, states), "purged");
                 }});
}

void AddMessageSubcommands(CLI::App& app, Args& a, std::vector<Subcommand>& out) {
  CLI::App* enqueue = app.add_subcommand("enqueue", "Put one message into a queue.");
  enqueue->add_option("queue", a.queue, "queue name")->required();
  enqueue->add_option("--id", a.id, "message id (default: generated by the server)");
  enqueue->add_option("--priority", a.priority, "lower runs first (e.g. a deadline in ms)");
  CLI::Option* text = enqueue->add_option("--payload", a.payload, "payload text");
  enqueue->add_option("--payload-file", a.payload_file, "payload bytes from a file ('-': stdin)")
      ->excludes(text);
  enqueue->add_option("--meta", a.meta, "metadata pair (repeatable)")->check(kKeyValue);
  a.enqueue_delay = enqueue->add_option("--delay-ms", a.delay_ms, "invisible for this long");
  a.enqueue_visible_at =
      enqueue->add_option("--visible-at", a.visible_at, "invisible until this time (ms)")
          ->excludes(a.enqueue_delay);
  a.enqueue_max_attempts =
      enqueue->add_option("--max-attempts", a.max_attempts, "instead of the queue's default");
  enqueue->add_option("--batch", a.batch, "the batch it joins (open, not sealed)");
  a.enqueue_ttl = enqueue->add_option("--ttl-ms", a.ttl_ms,
                                      "canceled as expired if still pending or invisible this "
                                      "long after the enqueue (else the queue's ttl_ms)");
  a.enqueue_debounce = enqueue->add_option(
      "--debounce-ms", a.debounce_ms,
      "with --id: replace a pending or invisible message of that id, visible no earlier than "
      "now + this");
  enqueue->add_option("--wait-ms", a.wait_ms,
                      "answer once the message is terminal (at most this long), with its "
                      "state and result");
  enqueue
      ->add_option("--depends-on", a.depends_on,
                   "messages that must complete first: queue/id or an id of this queue "
                   "(repeatable, or comma-separated)")
      ->delimiter(',');
  enqueue
      ->add_option("--on-dependency-failure", a.on_dependency_failure,
                   "when a dependency is canceled or errored: cancel (default), release, error")
      ->check(CLI::IsMember(PolicyNames()));
  out.push_back(
      {enqueue, [&a](client::Client& c) {
         client::EnqueueItem item;
         item.id = a.id;
         item.priority = a.priority;
         item.metadata = ToPairs(a.meta);
         item.payload = a.payload;  // --payload-file was read into it
         if (a.enqueue_delay->count()) item.delay_ms = a.delay_ms;
         if (a.enqueue_visible_at->count()) item.visible_at = a.visible_at;
         if (a.enqueue_max_attempts->count()) item.max_attempts = a.max_attempts;
         item.depends_on = a.depends_on;
         for (const auto policy : p::EnumValuesDependencyFailurePolicy()) {
           if (a.on_dependency_failure == p::EnumNameDependencyFailurePolicy(policy)) {
             item.on_dependency_failure = policy;
           }
         }
         item.batch = a.batch;
         if (a.enqueue_ttl->count()) item.ttl_ms = a.ttl_ms;
         if (a.enqueue_debounce->count()) item.debounce_ms = a.debounce_ms;
         return Expect<p::EnqueueResults>(
             c.Enqueue(a.queue, {item}, a.wait_ms), [](const p::EnqueueResults& r) {
               if (!r.items() || r.items()->size() != 1) {
                 return Failed(Error::Connection(Code::kInternal, "protocol: expected one item"));
               }
               const p::EnqueueResult* e = r.items()->Get(0);
               if (const p::Error* error = e->error()) {
                 return Failed(
                     Error::Server(static_cast<Code>(error->code()),
                                   error->message() ? error->message()->str() : std::string()));
               }
               json::object o;
               o["id"] = e->id() ? e->id()->string_view() : std::string_view();
               o["version"] = e->version();
               o["duplicate"] = e->duplicate();
               if (const p::WaitItem* outcome = e->outcome()) {
                 for (auto& [key, value] : WaitItemToJson(*outcome)) {
                   if (key != "id") o[key] = value;
                 }
               }
               Print(o);
               return kExitOk;
             });
       }});

  CLI::App* dequeue = app.add_subcommand("dequeue", "Lease messages; one line per message.");
  dequeue->add_option("queue", a.queue, "queue name")->required();
  dequeue->add_option("--max", a.max, "at most this many messages (1-1000)");
  a.dequeue_lease = dequeue->add_option("--lease-ms", a.lease_ms, "lease length");
  dequeue->add_option("--filter", a.filters, "only messages with this metadata (repeatable)")
      ->check(kKeyValue);
  dequeue->add_option("--wait-ms", a.wait_ms, "long poll: wait this long for a message");
  dequeue->add_flag("--include-dependency-results", a.include_dependency_results,
                    "each message carries its dependencies' outcomes (dependency_results)");
  dequeue->add_option("--worker-id", a.worker_id,
                      "who dequeues: kept in each leased message's history");
  out.push_back({dequeue, [&a](client::Client& c) {
                   client::DequeueOptions o;
                   o.worker_id = a.worker_id;
                   o.max = a.max;
                   if (a.dequeue_lease->count()) o.lease_ms = a.lease_ms;
                   o.filter = ToPairs(a.filters);
                   o.wait_ms = a.wait_ms;
                   o.include_dependency_results = a.include_dependency_results;
                   return Expect<p::DequeueResult>(c.Dequeue(a.queue, o),
                                                   [](const p::DequeueResult& r) {
                                                     if (r.messages()) {
                                                       for (const p::Message* m : *r.messages()) {
                                                         Print(MessageToJson(*m));
                                                       }
                                                     }
                                                     return kExitOk;
                                                   });
                 }});

  CLI::App* complete = app.add_subcommand("complete", "Complete a leased message.");
  complete->add_option("queue", a.queue, "queue name")->required();
  complete->add_option("id", a.id, "message id")->required();
  complete->add_option("token", a.lease_token, "lease token")->required();
  CLI::Option* result_text =
      complete->add_option("--result", a.result, "result text, stored with the message");
  complete->add_option("--result-file", a.result_file, "result bytes from a file ('-': stdin)")
      ->excludes(result_text);
  complete->add_flag("--next", a.next,
                     "complete-and-next: in the same request, lease the queue's next messages "
                     "(printed after the completion, one line each)");
  complete->add_option("--max", a.max, "with --next: at most this many messages (1-1000)");
  a.complete_lease = complete->add_option("--lease-ms", a.lease_ms, "with --next: lease length");
  complete->add_option("--filter", a.filters, "with --next: only messages with this metadata")
      ->check(kKeyValue);
  complete->add_option("--wait-ms", a.wait_ms, "with --next: wait this long for a message");
  complete->add_flag("--include-dependency-results", a.include_dependency_results,
                     "with --next: each message carries its dependencies' outcomes");
  complete->add_option("--worker-id", a.worker_id, "with --next: who dequeues (history)");
  out.push_back({complete, [&a](client::Client& c) {
                   client::CompleteItem item{a.id, a.lease_token, a.result};
                   if (!a.next) return PrintItems(c.Complete(a.queue, {item}), {a.id}, "completed");
                   client::DequeueOptions o;
                   o.max = a.max;
                   if (a.complete_lease->count()) o.lease_ms = a.lease_ms;
                   o.filter = ToPairs(a.filters);
                   o.wait_ms = a.wait_ms;
                   o.include_dependency_results = a.include_dependency_results;
                   o.worker_id = a.worker_id;
                   const auto reply = c.CompleteAndNext(a.queue, {item}, o);
                   const int code = PrintItems(reply, {a.id}, "completed");
                   if (!reply.ok()) return code;
                   const auto* r = reply->result<p::ItemResults>();
                   if (r != nullptr && r->next() != nullptr) {
                     for (const p::Message* m : *r->next()) Print(MessageToJson(*m));
                   }
                   if (r != nullptr && r->next_error() != nullptr) {
                     std::fflush(stdout);
                     PrintItemError("next", r->next_error()->code(), r->next_error()->message());
                     return kExitServerError;
                   }
                   return code;
                 }});

  CLI::App* wait = app.add_subcommand(
      "wait", "Wait for messages to be terminal; one line per id with its state and result.");
  wait->add_option("queue", a.queue, "queue name")->required();
  wait->add_option("ids", a.ids, "message ids (1-1000)")->required();
  wait->add_option("--wait-ms", a.wait_ms, "wait at most this long (0-60000; default 0)");
  out.push_back({wait, [&a](client::Client& c) {
                   return Expect<p::WaitResult>(
                       c.Wait(a.queue, a.ids, a.wait_ms), [](const p::WaitResult& r) {
                         int exit_code = kExitOk;
                         if (r.items() != nullptr) {
                           for (const p::WaitItem* item : *r.items()) {
                             if (item->error() != nullptr) {
                               std::fflush(stdout);
                               PrintItemError(item->id() ? item->id()->string_view() : "",
                                              item->error()->code(), item->error()->message());
                               exit_code = kExitServerError;
                               continue;
                             }
                             Print(WaitItemToJson(*item));
                           }
                         }
                         return exit_code;
                       });
                 }});

  CLI::App* fail = app.add_subcommand("fail", "Fail a leased message (retry or error it).");
  fail->add_option("queue", a.queue, "queue name")->required();
  fail->add_option("id", a.id, "message id")->required();
  fail->add_option("token", a.lease_token, "lease token")->required();
  fail->add_option("--error", a.error, "error text (kept as last_error)");
  a.retry_delay = fail->add_option("--retry-delay-ms", a.retry_delay_ms,
                                   "retry after this long instead of the backoff");
  out.push_back({fail, [&a](client::Client& c) {
                   client::FailOptions o;
                   o.error = a.error;
                   if (a.retry_delay->count()) o.retry_delay_ms = a.retry_delay_ms;
                   return Expect<p::FailResult>(
                       c.Fail(a.queue, a.id, a.lease_token, o), [&a](const p::FailResult& r) {
                         json::object out;
                         out["id"] = a.id;
                         out["state"] = p::EnumNameMessageState(r.state());
                         out["visible_at"] = r.visible_at();
                         out["dead_letter_queue"] = r.dead_letter_queue()
                                                        ? r.dead_letter_queue()->string_view()
                                                        : std::string_view();
                         Print(out);
                         return kExitOk;
                       });
                 }});

  CLI::App* note = app.add_subcommand("note", "Add a note to a leased message's history.");
  note->add_option("queue", a.queue, "queue name")->required();
  note->add_option("id", a.id, "message id")->required();
  note->add_option("token", a.lease_token, "lease token")->required();
  note->add_option("text", a.note, "the note (1-1024 bytes)")->required();
  out.push_back({note, [&a](client::Client& c) {
                   return Expect<p::Done>(c.Note(a.queue, a.id, a.lease_token, a.note),
                                          [&a](const p::Done&) {
                                            json::object o;
                                            o["id"] = a.id;
                                            o["noted"] = true;
                                            Print(o);
                                            return kExitOk;
                                          });
                 }});

  CLI::App* extend = app.add_subcommand("extend", "Extend a lease.");
  extend->add_option("queue", a.queue, "queue name")->required();
  extend->add_option("id", a.id, "message id")->required();
  extend->add_option("token", a.lease_token, "lease token")->required();
  extend->add_option("--lease-ms", a.lease_ms, "new lease length from now")->required();
  out.push_back({extend, [&a](client::Client& c) {
                   return Expect<p::ExtendResult>(
                       c.Extend(a.queue, a.id, a.lease_token, a.lease_ms),
                       [&a](const p::ExtendResult& r) {
                         json::object o;
                         o["id"] = a.id;
                         o["lease_expires_at"] = r.lease_expires_at();
                         Print(o);
                         return kExitOk;
                       });
                 }});
}

// Checks, once `cmd` is parsed, that exactly one way of choosing messages was given: IDs (or
// one ID), --filter, or --all; `how` lists them for the message. `more` checks the rest.
void RequireOneSelection(CLI::App* cmd, const Args& a, std::string how,
                         std::function<void()> more = {}) {
  cmd->callback([cmd, &a, how = std::move(how), more = std::move(more)] {
    const int given = int(!a.ids.empty() || !a.id.empty()) + int(!a.filters.empty()) + int(a.all);
    if (given != 1) throw CLI::ValidationError(cmd->get_name(), "give " + how + " (one of them)");
    if (more) more();
  });
}

void AddBulkSubcommands(CLI::App& app, Args& a, std::vector<Subcommand>& out) {
  CLI::App* cancel = app.add_subcommand("cancel", "Cancel messages by id, or by --filter.");
  cancel->add_option("queue", a.queue, "queue name")->required();
  cancel->add_option("ids", a.ids, "message ids");
  cancel->add_option("--filter", a.filters, "bulk: every message with this metadata")
      ->check(kKeyValue);
  RequireOneSelection(cancel, a, "IDs or --filter");
  out.push_back({cancel, [&a](client::Client& c) {
                   if (!a.filters.empty()) {
                     return PrintCount(c.CancelByFilter(a.queue, ToPairs(a.filters)), "canceled");
                   }
                   return PrintItems(c.Cancel(a.queue, a.ids), a.ids, "canceled");
                 }});

  CLI::App* repri =
      app.add_subcommand("reprioritize", "Change the priority or visible_at of a message.");
  repri->add_option("queue", a.queue, "queue name")->required();
  repri->add_option("id", a.id, "message id");
  a.reprioritize_priority = repri->add_option("--priority", a.priority, "new priority");
  a.reprioritize_visible_at =
      repri->add_option("--visible-at", a.visible_at, "new visible_at (ms; invisible only)");
  repri->add_option("--filter", a.filters, "bulk: every message with this metadata")
      ->check(kKeyValue);
  RequireOneSelection(repri, a, "an ID or --filter", [&a] {
    if (a.reprioritize_priority->count() == 0 && a.reprioritize_visible_at->count() == 0) {
      throw CLI::ValidationError("reprioritize", "give --priority and/or --visible-at");
    }
  });
  out.push_back({repri, [&a](client::Client& c) {
                   client::ReprioritizeChange change;
                   if (a.reprioritize_priority->count()) change.priority = a.priority;
                   if (a.reprioritize_visible_at->count()) change.visible_at = a.visible_at;
                   if (!a.filters.empty()) {
                     return PrintCount(c.ReprioritizeByFilter(a.queue, ToPairs(a.filters), change),
                                       "reprioritized");
                   }
                   return Expect<p::VersionResult>(c.Reprioritize(a.queue, a.id, change),
                                                   [&a](const p::VersionResult& r) {
                                                     json::object o;
                                                     o["id"] = a.id;
                                                     o["version"] = r.version();
                                                     Print(o);
                                                     return kExitOk;
                                                   });
                 }});

  CLI::App* redrive = app.add_subcommand(
      "redrive", "Move errored messages back to pending: by id, --all, or --filter.");
  redrive->add_option("queue", a.queue, "queue name")->required();
  redrive->add_option("ids", a.ids, "message ids");
  redrive->add_flag("--all", a.all, "every errored message");
  redrive->add_option("--filter", a.filters, "errored messages with this metadata")
      ->check(kKeyValue);
  RequireOneSelection(redrive, a, "IDs, --all or --filter");
  out.push_back({redrive, [&a](client::Client& c) {
                   if (a.all) return PrintCount(c.RedriveAll(a.queue), "redriven");
                   if (!a.filters.empty()) {
                     return PrintCount(c.RedriveByFilter(a.queue, ToPairs(a.filters)), "redriven");
                   }
                   return PrintItems(c.Redrive(a.queue, a.ids), a.ids, "pending");
                 }});
}

void AddReadSubcommands(CLI::App& app, Args& a, std::vector<Subcommand>& out) {
  CLI::App* get = app.add_subcommand("get", "One message, whole.");
  get->add_option("queue", a.queue, "queue name")->required();
  get->add_option("id", a.id, "message id")->required();
  get->add_flag("--include-dependency-results", a.include_dependency_results,
                "with its dependencies' outcomes (dependency_results)");
  out.push_back({get, [&a](client::Client& c) {
                   const auto reply = c.Get(a.queue, a.id, a.include_dependency_results);
                   return Expect<p::GetResult>(reply, [](const p::GetResult& r) {
                     if (r.message() == nullptr) {
                       return Failed(Error::Connection(Code::kInternal, "protocol: no message"));
                     }
                     Print(MessageToJson(*r.message()));
                     return kExitOk;
                   });
                 }});

  CLI::App* set_limits = app.add_subcommand(
      "set-key-limits",
      "Override the key limits of one flow-key value (no flag: back to the queue's).");
  set_limits->add_option("queue", a.queue, "queue name")->required();
  set_limits->add_option("value", a.key_value, "the flow-key value")->required();
  a.key_concurrency_flag = set_limits->add_option("--concurrency", a.key_concurrency,
                                                  "its messages running at once (0: no limit)");
  a.key_rate_flag =
      set_limits->add_option("--rate-per-s", a.key_rate_per_s, "its dequeues per second (0: none)");
  a.key_burst_flag = set_limits->add_option("--burst", a.key_burst, "its bucket size");
  a.key_weight_flag =
      set_limits->add_option("--weight", a.key_weight, "its fair-share weight (1-1000)");
  out.push_back({set_limits, [&a](client::Client& c) {
                   client::KeyLimits l;
                   if (a.key_concurrency_flag->count()) l.concurrency = a.key_concurrency;
                   if (a.key_rate_flag->count()) l.rate_per_s = a.key_rate_per_s;
                   if (a.key_burst_flag->count()) l.burst = a.key_burst;
                   if (a.key_weight_flag->count()) l.weight = a.key_weight;
                   return Expect<p::KeyResult>(c.SetKeyLimits(a.queue, a.key_value, l),
                                               [](const p::KeyResult& r) {
                                                 Print(KeyInfoToJson(*r.key()));
                                                 return kExitOk;
                                               });
                 }});

  CLI::App* get_limits = app.add_subcommand(
      "get-key-limits", "One flow-key value: its overrides, limits in effect and messages.");
  get_limits->add_option("queue", a.queue, "queue name")->required();
  get_limits->add_option("value", a.key_value, "the flow-key value")->required();
  out.push_back({get_limits, [&a](client::Client& c) {
                   return Expect<p::KeyResult>(c.GetKeyLimits(a.queue, a.key_value),
                                               [](const p::KeyResult& r) {
                                                 Print(KeyInfoToJson(*r.key()));
                                                 return kExitOk;
                                               });
                 }});

  CLI::App* list_keys =
      app.add_subcommand("list-keys", "The top flow-key values of a queue, one per line.");
  list_keys->add_option("queue", a.queue, "queue name")->required();
  list_keys->add_option("--order", a.key_order, "pending|running|throttled")
      ->check(CLI::IsMember({"pending", "running", "throttled"}))
      ->capture_default_str();
  list_keys->add_option("--limit", a.key_limit, "at most this many (1-1000)")
      ->capture_default_str();
  out.push_back({list_keys, [&a](client::Client& c) {
                   const p::KeyOrder order = a.key_order == "running"     ? p::KeyOrder::running
                                             : a.key_order == "throttled" ? p::KeyOrder::throttled
                                                                          : p::KeyOrder::pending;
                   return Expect<p::KeyList>(c.ListKeys(a.queue, order, a.key_limit),
                                             [](const p::KeyList& r) {
                                               if (r.keys()) {
                                                 for (const p::KeyInfo* k : *r.keys()) {
                                                   Print(KeyInfoToJson(*k));
                                                 }
                                               }
                                               return kExitOk;
                                             });
                 }});

  CLI::App* history = app.add_subcommand("history", "A message's transitions, oldest first.");
  history->add_option("queue", a.queue, "queue name")->required();
  history->add_option("id", a.id, "message id")->required();
  out.push_back({history, [&a](client::Client& c) {
                   return Expect<p::HistoryResult>(c.History(a.queue, a.id),
                                                   [](const p::HistoryResult& r) {
                                                     Print(HistoryToJson(r));
                                                     return kExitOk;
                                                   });
                 }});

  CLI::App* browse =
      app.add_subcommand("browse", "Message summaries in priority order, one per line.");
  browse->add_option("queue", a.queue, "queue name")->required();
  browse->add_option("--state", a.state, "state to list")
      ->required()
      ->check(CLI::IsMember(kStateNames));
  browse->add_option("--filter", a.filters, "only messages with this metadata (repeatable)")
      ->check(kKeyValue);
  browse->add_option("--limit", a.limit, "at most this many (1-1000)");
  browse->add_option("--cursor", a.cursor, "next_cursor of the previous page");
  out.push_back({browse, [&a](client::Client& c) {
                   client::BrowseOptions o;
                   o.state = ToState(a.state);
                   o.filter = ToPairs(a.filters);
                   o.cursor = a.cursor;
                   o.limit = a.limit;
                   return Expect<p::BrowseResult>(
                       c.Browse(a.queue, o), [](const p::BrowseResult& r) {
                         if (r.messages()) {
                           for (const p::MessageSummary* m : *r.messages())
                             Print(SummaryToJson(*m));
                         }
                         if (r.next_cursor() && r.next_cursor()->size() > 0) {
                           json::object o;
                           o["next_cursor"] = r.next_cursor()->string_view();
                           Print(o);
                         }
                         return kExitOk;
                       });
                 }});

  CLI::App* count = app.add_subcommand("count", "Counts per state (and blocked).");
  count->add_option("queue", a.queue, "queue name")->required();
  count->add_option("--filter", a.filters, "only messages with this metadata (repeatable)")
      ->check(kKeyValue);
  out.push_back({count, [&a](client::Client& c) {
                   return Expect<p::CountResult>(c.Count(a.queue, ToPairs(a.filters)),
                                                 [](const p::CountResult& r) {
                                                   Print(CountsToJson(r.counts()));
                                                   return kExitOk;
                                                 });
                 }});

  CLI::App* explain =
      app.add_subcommand("explain", "Why a message (or a filter) is or is not dequeueable.");
  explain->add_option("queue", a.queue, "queue name")->required();
  explain->add_option("id", a.id, "message id");
  explain->add_option("--filter", a.filters, "explain a filter instead of an id")->check(kKeyValue);
  RequireOneSelection(explain, a, "an ID or --filter");
  out.push_back({explain, [&a](client::Client& c) {
                   auto reply = a.filters.empty() ? c.Explain(a.queue, a.id)
                                                  : c.ExplainFilter(a.queue, ToPairs(a.filters));
                   return Expect<p::ExplainResult>(reply, [](const p::ExplainResult& r) {
                     Print(ExplainToJson(r));
                     return kExitOk;
                   });
                 }});

  CLI::App* stats = app.add_subcommand("stats", "Server counters.");
  out.push_back({stats, [](client::Client& c) {
                   return Expect<p::StatsResult>(c.Stats(), [](const p::StatsResult& r) {
                     Print(StatsToJson(r));
                     return kExitOk;
                   });
                 }});

  CLI::App* health = app.add_subcommand("health", "Liveness and readiness.");
  out.push_back({health, [](client::Client& c) {
                   return Expect<p::HealthResult>(c.Health(), [](const p::HealthResult& r) {
                     Print(HealthToJson(r));
                     return kExitOk;
                   });
                 }});
}

// ---- Cluster -----------------------------------------------------------------------------

std::string_view View(const flatbuffers::String* s) {
  return s == nullptr ? std::string_view() : s->string_view();
}

// cluster status --table: the view and one row per member, for people.
void PrintClusterTable(const p::ClusterResult& c) {
  if (c.cluster() == nullptr || c.cluster()->size() == 0) {
    std::printf("not in a cluster: %.*s is a standalone server\n", int(View(c.node()).size()),
                View(c.node()).data());
  } else {
    const std::string_view primary = View(c.primary());
    const std::string_view sync = View(c.sync_standby());
    std::printf(
        "cluster %.*s  epoch %llu  primary %s  sync standby %s  replication %.*s  "
        "(as %.*s sees it)\n",
        int(View(c.cluster()).size()), View(c.cluster()).data(),
        static_cast<unsigned long long>(c.epoch()),
        primary.empty()
            ? "(none)"
            : (std::string(primary) + " " + std::string(View(c.primary_addr()))).c_str(),
        sync.empty() ? "(none)" : std::string(sync).c_str(), int(View(c.replication()).size()),
        View(c.replication()).data(), int(View(c.node()).size()), View(c.node()).data());
  }
  std::printf("%-12s %-10s %-22s %-8s %-12s %-12s %-12s %-8s %s\n", "NODE", "ROLE", "ADDR", "EPOCH",
              "END_LSN", "FLUSHED_LSN", "LAG_RECORDS", "LAG_MS", "SYNC");
  if (c.members() == nullptr) return;
  for (const p::ClusterMember* m : *c.members()) {
    std::printf("%-12s %-10s %-22s %-8llu %-12llu %-12llu %-12llu %-8lld %s\n",
                std::string(View(m->node())).c_str(), p::EnumNameNodeRole(m->role()),
                std::string(View(m->addr())).c_str(), static_cast<unsigned long long>(m->epoch()),
                static_cast<unsigned long long>(m->end_lsn()),
                static_cast<unsigned long long>(m->flushed_lsn()),
                static_cast<unsigned long long>(m->lag_records()),
                static_cast<long long>(m->lag_ms()), m->sync() ? "yes" : "");
  }
}

// Polls the cluster's view (through `c`) until `accept` holds for it or `timeout_ms` passes; the
// last view, or the error of the last try when none came.
client::Result<Reply> WaitForView(client::Client& c, int timeout_ms,
                                  const std::function<bool(const p::ClusterResult&)>& accept) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (true) {
    client::Result<Reply> view = c.Cluster();
    if (view.ok() && view->result<p::ClusterResult>() != nullptr &&
        accept(*view->result<p::ClusterResult>())) {
      return view;
    }
    if (std::chrono::steady_clock::now() >= deadline) return view;
    // Polling a condition with a deadline: a new primary shows within one coordinator round.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// "to", "primary_addr" and "epoch" of the view's primary.
void PutPrimary(json::object& o, const p::ClusterResult& r) {
  o["to"] = View(r.primary());
  o["primary_addr"] = View(r.primary_addr());
  o["epoch"] = r.epoch();
}

int PrintBatch(client::Result<Reply> reply) {
  return Expect<p::BatchResult>(std::move(reply), [](const p::BatchResult& r) {
    if (r.batch() == nullptr)
      return Failed(Error::Connection(Code::kInternal, "protocol: no batch"));
    Print(BatchToJson(*r.batch()));
    return kExitOk;
  });
}

void AddFlowSubcommand(CLI::App& app, Args& a, std::vector<Subcommand>& out) {
  CLI::App* flow = app.add_subcommand(
      "enqueue-flow",
      "Enqueue a tree of messages across queues at once, each waiting on its children "
      "(docs/semantics.md, Flows); one line per node, parents before children.");
  flow->add_option("--file", a.flow_file,
                   "the flow as JSON: a node {queue, id, payload, priority, metadata, ..., "
                   "children: [...]} or a list of them ('-': stdin)")
      ->required();
  out.push_back({flow, [&a](client::Client& c) {
                   std::string text;
                   if (!ReadFile(a.flow_file, &text)) {
                     return UsageError("--file: cannot read " + a.flow_file);
                   }
                   std::vector<client::FlowNode> roots;
                   std::string error;
                   if (!FlowFromJson(text, &roots, &error)) return UsageError("--file: " + error);
                   return Expect<p::FlowResult>(c.EnqueueFlow(roots), [](const p::FlowResult& r) {
                     if (r.nodes() != nullptr) {
                       for (const p::FlowNodeResult* n : *r.nodes()) Print(FlowNodeToJson(*n));
                     }
                     return kExitOk;
                   });
                 }});
}

void AddBatchSubcommands(CLI::App& app, Args& a, std::vector<Subcommand>& out) {
  CLI::App* batch = app.add_subcommand(
      "batch", "Batches: create one, seal it, read its counts (docs/semantics.md, Batches).");
  batch->require_subcommand(1);

  CLI::App* create = batch->add_subcommand(
      "create", "Create an open batch (or confirm it), with the message to enqueue once done.");
  create->add_option("id", a.id, "batch id")->required();
  create->add_option("--callback-queue", a.callback_queue,
                     "the queue of the callback message (none: no callback)");
  create->add_option("--callback-id", a.callback_id, "its id (default: batch:<id>)");
  create->add_option("--priority", a.priority, "its priority");
  CLI::Option* text = create->add_option("--payload", a.payload, "its payload text");
  create->add_option("--payload-file", a.payload_file, "its payload from a file ('-': stdin)")
      ->excludes(text);
  create->add_option("--meta", a.meta, "its metadata pair (repeatable)")->check(kKeyValue);
  a.batch_max_attempts = create->add_option("--max-attempts", a.max_attempts, "its max_attempts");
  a.batch_retention = create->add_option("--retention-ms", a.retention_ms,
                                         "how long a done batch stays readable (default 3600000)");
  out.push_back({create, [&a](client::Client& c) {
                   client::CreateBatchOptions o;
                   const bool has_callback = !a.callback_queue.empty();
                   if (!has_callback &&
                       (!a.callback_id.empty() || !a.payload.empty() || !a.meta.empty() ||
                        a.priority != 0 || a.batch_max_attempts->count())) {
                     return UsageError("batch create: the callback flags need --callback-queue");
                   }
                   if (has_callback) {
                     client::BatchCallback cb;
                     cb.queue = a.callback_queue;
                     cb.id = a.callback_id;
                     cb.priority = a.priority;
                     cb.payload = a.payload;  // --payload-file was read into it
                     cb.metadata = ToPairs(a.meta);
                     if (a.batch_max_attempts->count()) cb.max_attempts = a.max_attempts;
                     o.callback = std::move(cb);
                   }
                   if (a.batch_retention->count()) o.retention_ms = a.retention_ms;
                   return PrintBatch(c.CreateBatch(a.id, o));
                 }});

  CLI::App* seal = batch->add_subcommand(
      "seal", "No member may join any more; done (callback enqueued) once none is active.");
  seal->add_option("id", a.id, "batch id")->required();
  out.push_back({seal, [&a](client::Client& c) { return PrintBatch(c.SealBatch(a.id)); }});

  CLI::App* get = batch->add_subcommand("get", "A batch's state and its members' counts.");
  get->add_option("id", a.id, "batch id")->required();
  out.push_back({get, [&a](client::Client& c) { return PrintBatch(c.GetBatch(a.id)); }});
}

void AddClusterSubcommands(CLI::App& app, Args& a, std::vector<Subcommand>& out) {
  CLI::App* cluster = app.add_subcommand(
      "cluster", "A cluster's members and roles (status); a planned change of primary.");
  cluster->require_subcommand(1);

  CLI::App* status = cluster->add_subcommand(
      "status",
      "Members, roles, epoch, log positions, lag and the synchronous standby, as one node sees "
      "them (the primary's view when --addr lists the cluster and it has one).");
  status->add_flag("--table", a.table, "a table for people instead of the JSON line");
  out.push_back({status, [&a](client::Client& c) {
                   return Expect<p::ClusterResult>(c.Cluster(), [&a](const p::ClusterResult& r) {
                     if (a.table) {
                       PrintClusterTable(r);
                     } else {
                       Print(ClusterToJson(r));
                     }
                     return kExitOk;
                   });
                 }});

  CLI::App* switchover = cluster->add_subcommand(
      "switchover",
      "Hand the primary's role to a standby (default: the synchronous standby) with no "
      "acknowledged write lost; waits until the new primary leads.");
  switchover->add_option("--to", a.to, "node name of the standby to promote");
  out.push_back(
      {switchover, [&a](client::Client& c) {
         client::Result<Reply> before = c.Cluster();
         if (!before.ok()) return Failed(before.error());
         const p::ClusterResult* was = before->result<p::ClusterResult>();
         if (was == nullptr) {
           return Failed(Error::Connection(Code::kInternal, "protocol: no ClusterResult"));
         }
         const std::string from(View(was->primary()));
         const uint64_t from_epoch = was->epoch();
         client::Result<Reply> done = c.Switchover(a.to);
         if (!done.ok()) return Failed(done.error());
         // The old primary has handed over; the new one leads once it has won the
         // election (one coordinator round, and its promise fsynced).
         client::Result<Reply> after = WaitForView(c, a.timeout_ms, [&](const p::ClusterResult& r) {
           const std::string_view now = View(r.primary());
           return !now.empty() && now != from && r.epoch() > from_epoch;
         });
         if (!after.ok()) return Failed(after.error());
         const p::ClusterResult* is = after->result<p::ClusterResult>();
         if (is == nullptr || View(is->primary()).empty() || View(is->primary()) == from) {
           return Failed(Error::Server(
               Code::kUnavailable,
               "switchover: " + from + " handed over, but no new primary led within " +
                   std::to_string(a.timeout_ms) + " ms; see `sundial cluster status`"));
         }
         json::object o;
         o["switchover"] = true;
         o["from"] = from;
         PutPrimary(o, *is);
         Print(o);
         return kExitOk;
       }});
}

// ---- Main --------------------------------------------------------------------------------

// The token in a file. False when unreadable or empty.
bool ReadToken(const std::string& path, std::string* token) {
  if (!ReadFile(path, token)) return false;
  // As sundiald reads --auth-token-file: trailing newlines, carriage returns and spaces go.
  while (!token->empty() &&
         (token->back() == '\n' || token->back() == '\r' || token->back() == ' ')) {
    token->pop_back();
  }
  return !token->empty();
}

int Main(int argc, char** argv) {
  CLI::App app{"Command-line client of sundiald: one JSON object per line on stdout.", "sundial"};
  app.require_subcommand(1);
  app.fallthrough();  // global options after the subcommand too
  Args a;
  app.add_option("--addr", a.addr,
                 "server's binary TCP address host:port; or a cluster's nodes, comma-separated "
                 "(a:7400,b:7400,c:7400): the primary is followed")
      ->envname("SUNDIAL_ADDR")
      ->capture_default_str()
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--http-addr", a.http_addr,
                 "server's HTTP/WebSocket address for watch (default: --addr's host, port 7401)")
      ->envname("SUNDIAL_HTTP_ADDR")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--token-file", a.token_file, "file holding the auth token")
      ->envname("SUNDIAL_TOKEN_FILE")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_flag("--tls", a.tls, "TLS to both ports (the server runs with --tls-cert)")
      ->envname("SUNDIAL_TLS");
  app.add_option("--ca-file", a.ca_file,
                 "PEM CA certificates to verify the server with (default: the system's); implies "
                 "--tls")
      ->envname("SUNDIAL_CA_FILE")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--durability", a.durability, "durable (reply after fsync) or relaxed")
      ->check(CLI::IsMember({"durable", "relaxed"}))
      ->capture_default_str();
  app.add_option("--timeout-ms", a.timeout_ms, "connect and per-request timeout")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();

  std::vector<Subcommand> subcommands;
  AddQueueSubcommands(app, a, subcommands);
  AddMessageSubcommands(app, a, subcommands);
  AddBulkSubcommands(app, a, subcommands);
  AddReadSubcommands(app, a, subcommands);
  AddClusterSubcommands(app, a, subcommands);
  AddScheduleSubcommands(app, a, subcommands);
  AddBatchSubcommands(app, a, subcommands);
  AddFlowSubcommand(app, a, subcommands);

  CLI::App* watch = app.add_subcommand(
      "watch", "Stream a queue's events (or every queue's: '*') over WebSocket, one per line.");
  watch->add_option("queue", a.queue, "queue name, or '*'")->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help prints and exits 0; every other parse error is bad usage.
    return app.exit(e) == 0 ? kExitOk : kExitUsage;
  }

  client::Result<std::vector<client::Address>> addresses_or = client::ParseAddressList(a.addr);
  if (!addresses_or.ok()) return UsageError("--addr: " + addresses_or.error().message);
  const std::vector<client::Address> addresses = *addresses_or;
  const client::Address address = addresses.front();
  std::string token;
  if (!a.token_file.empty() && !ReadToken(a.token_file, &token)) {
    return UsageError("--token-file: cannot read a token from " + a.token_file);
  }

  const bool tls = a.tls || !a.ca_file.empty();
  if (!a.payload_file.empty() && !ReadFile(a.payload_file, &a.payload)) {
    return UsageError("--payload-file: cannot read " + a.payload_file);
  }
  if (!a.result_file.empty() && !ReadFile(a.result_file, &a.result)) {
    return UsageError("--result-file: cannot read " + a.result_file);
  }

  if (watch->parsed()) {
    client::WatchOptions o;
    o.http = {address.host, client::kDefaultHttpPort};
    if (!a.http_addr.empty()) {
      auto http = client::ParseAddress(a.http_addr, client::kDefaultHttpPort);
      if (!http.ok()) return UsageError("--http-addr: " + http.error().message);
      o.http = *http;
    }
    o.token = token;
    o.queue = a.queue;
    o.timeout_ms = a.timeout_ms;
    o.tls = tls;
    o.ca_file = a.ca_file;
    if (addresses.size() > 1 && a.http_addr.empty()) o.cluster = addresses;
    client::Result<void> watched = client::Watch(o, [](const p::EventMessage& event) {
      Print(EventToJson(event));
      std::fflush(stdout);
      return true;
    });
    return watched.ok() ? kExitOk : Failed(watched.error());
  }

  for (const Subcommand& s : subcommands) {
    if (!s.app->parsed()) continue;
    client::ConnectOptions options;
    options.token = token;
    options.timeout_ms = a.timeout_ms;
    options.tls = tls;
    options.ca_file = a.ca_file;
    auto connected = client::Client::Connect(addresses, options);
    if (!connected.ok()) return Failed(connected.error());
    client::Client& c = **connected;
    c.set_durability(a.durability == "relaxed" ? p::Durability::relaxed : p::Durability::durable);
    const int exit_code = s.run(c);
    std::fflush(stdout);
    return exit_code;
  }
  return UsageError("no subcommand");
}

}  // namespace
}  // namespace sundial::tools

int main(int argc, char** argv) { return sundial::tools::Main(argc, argv); }
