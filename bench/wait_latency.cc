// sundial-wait-latency: how much later than the completing request a `wait` on another
// connection is answered (docs/BENCHMARKS.md, "Results and waiting").
//
//   sundial-wait-latency [--addr HOST:PORT] [--rounds N] [--queue Q]
//
// Each round: enqueue one message; a waiter (its own connection, pipelined client) sends
// Wait(id, 30 s); a worker (a third connection) dequeues and completes it with a result. Times
// are taken on this machine's steady clock: when the complete's reply arrives (the completing
// request's own round trip, its fsync included) and when the wait's reply arrives. The figure
// is the difference, the wake-up's cost beyond the completion: the effect posting to the
// waiter's loop, the outcome read, and the reply's wait for the same group commit. Prints the
// percentiles of both, in microseconds, and one JSON line with --json.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <string>
#include <vector>

#include "bench/histogram.h"
#include "client/client.h"

namespace {

using namespace sundial;
namespace p = protocol;
using Clock = std::chrono::steady_clock;

uint64_t Nanos(Clock::duration d) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count());
}

int Fail(const std::string& what) {
  std::fprintf(stderr, "sundial-wait-latency: %s\n", what.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string addr = "127.0.0.1:7400";
  std::string queue = "wait-latency";
  int rounds = 2000;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--addr" && i + 1 < argc) {
      addr = argv[++i];
    } else if (arg == "--rounds" && i + 1 < argc) {
      rounds = std::atoi(argv[++i]);
    } else if (arg == "--queue" && i + 1 < argc) {
      queue = argv[++i];
    } else if (arg == "--json") {
      json = true;
    } else {
      std::fprintf(stderr,
                   "usage: sundial-wait-latency [--addr H:P] [--rounds N] [--queue Q] "
                   "[--json]\n");
      return 2;
    }
  }
  auto address = client::ParseAddress(addr);
  if (!address.ok()) return Fail(address.error().ToString());
  auto worker = client::Client::Connect(*address);
  auto producer = client::Client::Connect(*address);
  auto waiter = client::AsyncClient::Connect(*address);
  if (!worker.ok() || !producer.ok() || !waiter.ok()) return Fail("cannot connect to " + addr);
  (void)(*producer)->DeleteQueue(queue);
  bench::LatencyHistogram complete_us, wake_us, beyond_us;
  int64_t negative = 0;
  for (int round = 0; round < rounds; ++round) {
    const std::string id = "w" + std::to_string(round);
    client::EnqueueItem item;
    item.id = id;
    if (!(*producer)->Enqueue(queue, {item}).ok()) return Fail("enqueue");
    std::promise<Clock::time_point> answered;
    auto when = answered.get_future();
    const uint64_t request_id = (*waiter)->NextRequestId();
    (*waiter)->Send(
        client::BuildWait({request_id, client::Durability::durable}, queue, {id}, 30'000),
        [&answered](client::Result<client::Reply>) { answered.set_value(Clock::now()); });
    client::DequeueOptions o;
    o.wait_ms = 1000;
    auto leased = (*worker)->Dequeue(queue, o);
    if (!leased.ok() || leased->result<p::DequeueResult>()->messages()->size() != 1) {
      return Fail("dequeue");
    }
    const uint64_t token = leased->result<p::DequeueResult>()->messages()->Get(0)->lease_token();
    const auto sent = Clock::now();
    auto done = (*worker)->Complete(queue, {{id, token, "result"}});
    const auto acked = Clock::now();
    if (!done.ok()) return Fail("complete");
    const auto woken = when.get();
    complete_us.Record(Nanos(acked - sent));
    wake_us.Record(Nanos(woken - sent));
    if (woken >= acked) {
      beyond_us.Record(Nanos(woken - acked));
    } else {
      ++negative;  // the waiter's reply came first
      beyond_us.Record(0);
    }
  }
  (void)(*producer)->DeleteQueue(queue);
  auto us = [](const bench::LatencyHistogram& h, double q) { return h.Percentile(q) / 1000; };
  if (json) {
    std::printf(
        "{\"rounds\":%d,\"complete_p50_us\":%llu,\"complete_p99_us\":%llu,\"wake_p50_us\":%llu,"
        "\"wake_p99_us\":%llu,\"beyond_p50_us\":%llu,\"beyond_p99_us\":%llu,"
        "\"wait_first\":%lld}\n",
        rounds, (unsigned long long)us(complete_us, 0.5), (unsigned long long)us(complete_us, 0.99),
        (unsigned long long)us(wake_us, 0.5), (unsigned long long)us(wake_us, 0.99),
        (unsigned long long)us(beyond_us, 0.5), (unsigned long long)us(beyond_us, 0.99),
        (long long)negative);
  } else {
    std::printf("rounds %d\n", rounds);
    std::printf("complete round trip     p50 %6llu us  p99 %6llu us\n",
                (unsigned long long)us(complete_us, 0.5),
                (unsigned long long)us(complete_us, 0.99));
    std::printf("wait answered after it  p50 %6llu us  p99 %6llu us\n",
                (unsigned long long)us(wake_us, 0.5), (unsigned long long)us(wake_us, 0.99));
    std::printf("beyond the complete     p50 %6llu us  p99 %6llu us  (wait answered first: %lld)\n",
                (unsigned long long)us(beyond_us, 0.5), (unsigned long long)us(beyond_us, 0.99),
                (long long)negative);
  }
  return 0;
}
