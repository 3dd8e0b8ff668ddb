// sundial-drain ADDR QUEUE: dequeues (1000 at a time) and completes every message of QUEUE until
// a dequeue finds none; prints the number drained. bench/scale.sh uses it to show that memory
// goes back after a queue is drained by workers (sundial-bench's dequeue-complete keeps its
// queue's depth constant, so it cannot drain one).
#include <cstdio>
#include <string>
#include <vector>

#include "client/client.h"
#include "protocol/sundial_generated.h"

int main(int argc, char** argv) {
  namespace p = sundial::protocol;
  using sundial::client::Client;
  if (argc != 3) {
    std::fprintf(stderr, "usage: sundial-drain HOST:PORT QUEUE\n");
    return 2;
  }
  auto address = sundial::client::ParseAddress(argv[1]);
  if (!address.ok()) {
    std::fprintf(stderr, "sundial-drain: %s\n", address.error().ToString().c_str());
    return 2;
  }
  auto client = Client::Connect(*address);
  if (!client.ok()) {
    std::fprintf(stderr, "sundial-drain: %s\n", client.error().ToString().c_str());
    return 3;
  }
  const std::string queue = argv[2];
  sundial::client::DequeueOptions take;
  take.max = 1000;
  take.lease_ms = 600'000;
  uint64_t drained = 0;
  while (true) {
    auto leased = (*client)->Dequeue(queue, take);
    if (!leased.ok()) {
      std::fprintf(stderr, "sundial-drain: dequeue: %s\n", leased.error().ToString().c_str());
      return 1;
    }
    const auto* messages = leased->result<p::DequeueResult>()->messages();
    if (messages == nullptr || messages->size() == 0) break;
    std::vector<sundial::client::CompleteItem> done;
    done.reserve(messages->size());
    for (const auto* m : *messages) done.push_back({m->id()->str(), m->lease_token()});
    auto completed = (*client)->Complete(queue, done);
    if (!completed.ok()) {
      std::fprintf(stderr, "sundial-drain: complete: %s\n", completed.error().ToString().c_str());
      return 1;
    }
    for (const auto* s : *completed->result<p::ItemResults>()->items()) {
      if (s->code() != p::Code::OK) {
        std::fprintf(stderr, "sundial-drain: complete: %s\n", p::EnumNameCode(s->code()));
        return 1;
      }
    }
    drained += done.size();
  }
  std::printf("%llu\n", static_cast<unsigned long long>(drained));
  return 0;
}
