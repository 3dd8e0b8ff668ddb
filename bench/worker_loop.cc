// sundial-worker-loop: a durable worker's loop at one connection, two ways (docs/BENCHMARKS.md,
// "Complete-and-next"): `dequeue-complete` (dequeue one, complete it: two requests, two fsyncs
// per job) and `worker` (dequeue one, then complete-and-next repeatedly: one request, one
// fsync per job). A stopgap until sundial-bench has a `worker` workload (issue 25).
//
//   sundial-worker-loop [--addr HOST:PORT] [--jobs N] [--queue Q]
//
// Each way: enqueue N messages (untimed, batches of 1000), run the loop until the queue is
// empty, print jobs/s.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "client/client.h"

namespace {

using namespace sundial;
namespace p = protocol;
using Clock = std::chrono::steady_clock;

int Fail(const std::string& what) {
  std::fprintf(stderr, "sundial-worker-loop: %s\n", what.c_str());
  return 1;
}

bool Fill(client::Client& c, const std::string& queue, int jobs) {
  for (int done = 0; done < jobs;) {
    std::vector<client::EnqueueItem> items;
    for (int i = 0; i < 1000 && done < jobs; ++i, ++done) {
      client::EnqueueItem item;
      item.id = queue + "-" + std::to_string(done);
      item.payload = std::string(64, 'p');
      items.push_back(std::move(item));
    }
    if (!c.Enqueue(queue, items).ok()) return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string addr = "127.0.0.1:7400";
  std::string queue = "worker-loop";
  int jobs = 5000;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--addr") == 0)
      addr = argv[i + 1];
    else if (std::strcmp(argv[i], "--jobs") == 0)
      jobs = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--queue") == 0)
      queue = argv[i + 1];
    else
      return Fail(std::string("unknown option ") + argv[i]);
  }
  auto address = client::ParseAddress(addr);
  if (!address.ok()) return Fail(address.error().ToString());
  auto c = client::Client::Connect(*address);
  if (!c.ok()) return Fail(c.error().ToString());
  client::Client& client = **c;
  for (const std::string way : {"dequeue-complete", "worker"}) {
    const std::string q = queue + "-" + way;
    if (!Fill(client, q, jobs)) return Fail("enqueue failed");
    int done = 0;
    const auto start = Clock::now();
    if (way == "dequeue-complete") {
      while (true) {
        auto d = client.Dequeue(q, {});
        if (!d.ok()) return Fail(d.error().ToString());
        const auto* ms = d->result<p::DequeueResult>()->messages();
        if (ms->size() == 0) break;
        auto r = client.Complete(q, {{ms->Get(0)->id()->str(), ms->Get(0)->lease_token()}});
        if (!r.ok()) return Fail(r.error().ToString());
        ++done;
      }
    } else {
      auto d = client.Dequeue(q, {});
      if (!d.ok()) return Fail(d.error().ToString());
      const auto* ms = d->result<p::DequeueResult>()->messages();
      client::CompleteItem item{ms->Get(0)->id()->str(), ms->Get(0)->lease_token()};
      while (true) {
        auto r = client.CompleteAndNext(q, {item}, {});
        if (!r.ok()) return Fail(r.error().ToString());
        ++done;
        const auto* next = r->result<p::ItemResults>()->next();
        if (next == nullptr || next->size() == 0) break;
        item = {next->Get(0)->id()->str(), next->Get(0)->lease_token()};
      }
    }
    const double s = std::chrono::duration<double>(Clock::now() - start).count();
    std::printf("%-17s jobs %d  %.0f jobs/s\n", way.c_str(), done, done / s);
    (void)client.DeleteQueue(q);
  }
  return 0;
}
