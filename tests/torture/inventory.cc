#include "tests/torture/inventory.h"

#include <map>
#include <sstream>

namespace sundial::torture {

namespace p = sundial::protocol;

std::optional<client::Error> ReadInventory(client::Client& client,
                                           const std::vector<std::string>& queues, int64_t t,
                                           int round, std::string* out) {
  std::ostringstream block;
  for (const std::string& q : queues) {
    block << "inventory-queue " << t << ' ' << round << ' ' << q << '\n';
    for (p::MessageState state :
         {p::MessageState::waiting, p::MessageState::invisible, p::MessageState::running,
          p::MessageState::pending, p::MessageState::completed, p::MessageState::canceled,
          p::MessageState::errored}) {
      client::BrowseOptions b;
      b.state = state;
      b.limit = 1000;
      for (;;) {
        auto r = client.Browse(q, b);
        if (!r.ok()) {
          if (r.error().origin == client::Error::Origin::kServer &&
              r.error().code == Code::kNotFound) {
            break;  // not created yet
          }
          return r.error();
        }
        const auto* result = r->result<p::BrowseResult>();
        std::map<std::string, std::string> results;
        if (state == p::MessageState::completed && result->messages() != nullptr &&
            result->messages()->size() > 0) {
          std::vector<std::string> ids;
          for (const p::MessageSummary* m : *result->messages()) ids.push_back(m->id()->str());
          auto w = client.Wait(q, ids, 0);
          if (!w.ok()) return w.error();
          for (const p::WaitItem* item : *w->result<p::WaitResult>()->items()) {
            if (item->result() == nullptr || item->result()->size() == 0) continue;
            results[item->id()->str()] = std::string(
                reinterpret_cast<const char*>(item->result()->data()), item->result()->size());
          }
        }
        if (result->messages() != nullptr) {
          for (const p::MessageSummary* m : *result->messages()) {
            block << "inventory " << t << ' ' << round << ' ' << q << ' ' << m->id()->str() << ' '
                  << p::EnumNameMessageState(m->state()) << ' ' << m->priority();
            auto found = results.find(m->id()->str());
            block << ' ' << (found == results.end() ? std::string("-") : found->second) << '\n';
          }
        }
        if (result->next_cursor() == nullptr || result->next_cursor()->size() == 0) break;
        b.cursor = result->next_cursor()->str();
      }
    }
  }
  out->append(block.str());
  return std::nullopt;
}

}  // namespace sundial::torture
