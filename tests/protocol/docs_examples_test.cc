// docs/protocol.md stays true: every ```json block there, preceded by a comment naming its root
// type (<!-- Request --> or <!-- ServerMessage -->), parses with the JSON codec of that root type
// (the server's own parser on sundial.fbs), verifies as a FlatBuffer, and prints back to JSON
// that parses and prints to the same text. Every member of the Operation, Result and Event
// unions has at least one example, so a new operation without documentation fails here.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/json.h"
#include "protocol/sundial_generated.h"

#ifndef SUNDIAL_DOCS_DIR
#error "SUNDIAL_DOCS_DIR must name the docs/ directory (tests/CMakeLists.txt)"
#endif

namespace sundial::protocol {
namespace {

struct Example {
  int line = 0;      // of the opening fence, 1-based
  std::string root;  // "Request" or "ServerMessage"
  std::string json;
};

struct Extracted {
  std::vector<Example> examples;
  std::vector<std::string> problems;  // a json block without a root type, an open fence
};

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

std::string ReadDocs() {
  const std::string path = std::string(SUNDIAL_DOCS_DIR) + "/protocol.md";
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The root type named by a line `<!-- Request -->`, or "" if the line is not such a comment.
std::string RootTypeOf(std::string_view line) {
  constexpr std::string_view kOpen = "<!--";
  constexpr std::string_view kClose = "-->";
  line = Trim(line);
  if (line.substr(0, kOpen.size()) != kOpen || line.size() < kOpen.size() + kClose.size() ||
      line.substr(line.size() - kClose.size()) != kClose) {
    return "";
  }
  line = Trim(line.substr(kOpen.size(), line.size() - kOpen.size() - kClose.size()));
  return std::string(line);
}

Extracted ExtractExamples(const std::string& text) {
  Extracted out;
  std::istringstream in(text);
  std::string line;
  std::string previous;  // the last non-blank line outside a block
  int number = 0;
  bool in_json = false;
  bool in_other_block = false;
  Example current;
  while (std::getline(in, line)) {
    ++number;
    const std::string_view trimmed = Trim(line);
    if (in_json) {
      if (trimmed == "```") {
        out.examples.push_back(current);
        in_json = false;
      } else {
        current.json += line;
        current.json += '\n';
      }
      continue;
    }
    if (in_other_block) {
      if (trimmed == "```") in_other_block = false;
      continue;
    }
    if (trimmed == "```json") {
      in_json = true;
      current = Example{number, RootTypeOf(previous), ""};
      if (current.root != "Request" && current.root != "ServerMessage") {
        out.problems.push_back("line " + std::to_string(number) +
                               ": a json block must follow <!-- Request --> or "
                               "<!-- ServerMessage --> (found: \"" +
                               previous + "\")");
      }
      continue;
    }
    if (trimmed.substr(0, 3) == "```") {
      in_other_block = true;
      continue;
    }
    if (!trimmed.empty()) previous = std::string(trimmed);
  }
  if (in_json || in_other_block) out.problems.push_back("the file ends inside a fenced block");
  return out;
}

// FlatBuffers reads scalars in place: give the verifier 8-byte aligned bytes.
class AlignedBytes {
 public:
  explicit AlignedBytes(const std::string& bytes)
      : words_((bytes.size() + 7) / 8 + 1), size_(bytes.size()) {
    std::memcpy(words_.data(), bytes.data(), bytes.size());
  }
  const uint8_t* data() const { return reinterpret_cast<const uint8_t*>(words_.data()); }
  size_t size() const { return size_; }

 private:
  std::vector<uint64_t> words_;
  size_t size_;
};

bool Verifies(const std::string& root, const AlignedBytes& bytes) {
  flatbuffers::Verifier verifier(bytes.data(), bytes.size());
  if (root == "Request") return VerifyRequestBuffer(verifier);
  return verifier.VerifyBuffer<ServerMessage>(nullptr);
}

// What the examples cover.
struct Coverage {
  std::set<std::string> operations;
  std::set<std::string> results;
  std::set<std::string> events;
  int error_responses = 0;
};

const Extracted& Docs() {
  static const Extracted extracted = ExtractExamples(ReadDocs());
  return extracted;
}

// Parses, verifies and round-trips one example; records what it covers.
void Check(const Example& example, JsonCodec* codec, Coverage* coverage) {
  std::string bytes;
  std::string error;
  ASSERT_TRUE(codec->FromJson(example.json, &bytes, &error)) << error;
  const AlignedBytes aligned(bytes);
  ASSERT_TRUE(Verifies(example.root, aligned)) << "the parsed FlatBuffer does not verify";

  std::string printed;
  ASSERT_TRUE(codec->ToJson(bytes, &printed, &error)) << error;
  std::string reparsed;
  ASSERT_TRUE(codec->FromJson(printed, &reparsed, &error)) << error << "\nprinted: " << printed;
  ASSERT_TRUE(Verifies(example.root, AlignedBytes(reparsed)));
  std::string reprinted;
  ASSERT_TRUE(codec->ToJson(reparsed, &reprinted, &error)) << error;
  EXPECT_EQ(reprinted, printed) << "the JSON form does not round-trip";

  if (example.root == "Request") {
    const auto* request = flatbuffers::GetRoot<Request>(aligned.data());
    EXPECT_NE(request->request_id(), 0u) << "a request example should carry a request_id";
    EXPECT_NE(request->op_type(), Operation::NONE) << "a request example needs op_type";
    // A union type without its table is what no client should send.
    EXPECT_NE(request->op(), nullptr) << "op_type without op";
    coverage->operations.insert(EnumNameOperation(request->op_type()));
    return;
  }
  const auto* message = flatbuffers::GetRoot<ServerMessage>(aligned.data());
  ASSERT_NE(message->body(), nullptr) << "a ServerMessage needs a body";
  if (const Response* response = message->body_as_Response()) {
    if (response->error() != nullptr) {
      EXPECT_EQ(response->result_type(), Result::NONE) << "an error Response has no result";
      EXPECT_NE(response->error()->code(), Code::OK) << "an error needs a code";
      ++coverage->error_responses;
    } else {
      EXPECT_NE(response->result_type(), Result::NONE) << "a Response needs an error or result";
      EXPECT_NE(response->result(), nullptr) << "result_type without result";
      coverage->results.insert(EnumNameResult(response->result_type()));
    }
  } else if (const EventMessage* event = message->body_as_EventMessage()) {
    EXPECT_NE(event->event_type(), Event::NONE) << "an EventMessage needs event_type";
    EXPECT_NE(event->event(), nullptr) << "event_type without event";
    coverage->events.insert(EnumNameEvent(event->event_type()));
  }
}

// Checks every example once (failures are reported by the first test that asks).
const Coverage& CheckAll() {
  static const Coverage coverage = [] {
    Coverage c;
    JsonCodec request_codec("Request");
    JsonCodec server_codec("ServerMessage");
    for (const Example& example : Docs().examples) {
      if (example.root != "Request" && example.root != "ServerMessage") continue;  // reported
      SCOPED_TRACE("docs/protocol.md:" + std::to_string(example.line) + " (" + example.root +
                   ")\n" + example.json);
      Check(example, example.root == "Request" ? &request_codec : &server_codec, &c);
    }
    return c;
  }();
  return coverage;
}

// Every name of a generated union's enum but NONE, in schema order.
std::vector<std::string> MembersOf(const char* const* names) {
  std::vector<std::string> out;
  for (const char* const* name = names; *name != nullptr; ++name) {
    if (std::string_view(*name) != "NONE") out.emplace_back(*name);
  }
  return out;
}

TEST(DocsExamples, EveryJsonBlockNamesItsRootType) {
  ASSERT_FALSE(ReadDocs().empty()) << SUNDIAL_DOCS_DIR "/protocol.md: cannot read it";
  for (const std::string& problem : Docs().problems) ADD_FAILURE() << problem;
  EXPECT_GT(Docs().examples.size(), 40u) << "docs/protocol.md lost its examples";
}

TEST(DocsExamples, EveryExampleParsesVerifiesAndRoundTrips) {
  ASSERT_FALSE(Docs().examples.empty());
  CheckAll();
}

TEST(DocsExamples, EveryOperationResultAndEventHasAnExample) {
  const Coverage& coverage = CheckAll();
  for (const std::string& op : MembersOf(EnumNamesOperation())) {
    EXPECT_TRUE(coverage.operations.count(op)) << "no Request example with op_type " << op;
  }
  for (const std::string& result : MembersOf(EnumNamesResult())) {
    EXPECT_TRUE(coverage.results.count(result)) << "no Response example with result " << result;
  }
  for (const std::string& event : MembersOf(EnumNamesEvent())) {
    EXPECT_TRUE(coverage.events.count(event)) << "no EventMessage example with " << event;
  }
  EXPECT_GT(coverage.error_responses, 0) << "no example of an error Response";
}

}  // namespace
}  // namespace sundial::protocol
