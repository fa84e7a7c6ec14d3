// JSON parser, JSONL importer and QMSum importer (real data when present).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>

#include "sim/atomic_file.h"
#include "sim/error.h"
#include "test_traces_util.h"
#include "traces/json.h"
#include "traces/jsonl.h"
#include "traces/qmsum.h"
#include "traces/rag_trace_io.h"
#include "traces/stats.h"

using namespace mobisim;
using namespace mobisim::traces;

namespace {
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(TraceJson, ParsesValuesEscapesAndSurrogatePairs) {
  const auto v = json::parse(R"({"a": [1, -2.5e2, true, false, null], "s": "x\"\\\/\n\u00e9\ud83d\ude00"})", "t");
  ASSERT_TRUE(v.is_object());
  const auto& a = v.find("a")->as_array();
  ASSERT_EQ(a.size(), 5u);
  EXPECT_EQ(a[1].as_number(), -250.0);
  EXPECT_TRUE(a[2].as_bool());
  EXPECT_TRUE(a[4].is_null());
  EXPECT_EQ(v.find("s")->as_string(), "x\"\\/\n\xc3\xa9\xf0\x9f\x98\x80");
  EXPECT_EQ(v.find("missing"), nullptr);
}

TEST(TraceJson, RejectsMalformedInputWithLineAndColumn) {
  // Messages are nlohmann-json's ("... expected <what>"), prefixed with file:line:column.
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"{\"a\": 1,}", "expected string literal"},
      {"[1, 2", "expected ']'"},
      {"{\"a\" 1}", "expected ':'"},
      {"{\"a\": 01}", "expected '}'"},
      {"{\"a\": NaN}", "invalid literal"},
      {"\"abc", "missing closing quote"},
      {"\"\\ud800x\"", "surrogate"},
      {"\"\\udc00\"", "surrogate U+DC00..U+DFFF must follow"},
      {"\"a\tb\"", "control character"},
      {"{\"a\": 1, \"a\": 2}", "duplicate key"},
      {"[1] x", "expected end of input"},
      {"", "unexpected end of input"},
      {"// c\n1", "invalid literal"},
  };
  for (const auto& [text, want] : bad) {
    const std::string& input = text;  // clang 14 cannot capture a structured binding
    const std::string msg = error_of([&] { json::parse(input, "f.json"); });
    EXPECT_NE(msg.find(want), std::string::npos) << text << " -> " << msg;
    EXPECT_EQ(msg.rfind("f.json:", 0), 0u) << msg;
  }
  const std::string msg = error_of([] { json::parse("{\n  \"a\": [1,\n   2,,]}", "g.json"); });
  EXPECT_NE(msg.find("g.json:3:"), std::string::npos) << msg;
  std::string deep(10000, '[');
  EXPECT_NE(error_of([&] { json::parse(deep, "deep"); }).find("deep:1:513: nesting deeper than 512"), std::string::npos);
  // A value's position is where it starts, for the importers' messages.
  const auto doc = json::parse("{\"a\":\n  [1,\n   \"x\\\"y\", 250e-1,\n  true]}", "p.json");
  const auto& arr = doc.find("a")->as_array();
  EXPECT_EQ(doc.find("a")->line, 2);
  EXPECT_EQ(doc.find("a")->column, 3);
  EXPECT_EQ(arr[1].line, 3);
  EXPECT_EQ(arr[1].column, 4);
  EXPECT_EQ(arr[2].line, 3);
  EXPECT_EQ(arr[2].column, 12);
  EXPECT_EQ(arr[3].line, 4);
  EXPECT_EQ(arr[3].column, 3);
}

namespace {
JsonlOptions fast_jsonl() {
  JsonlOptions o;
  o.chunk_words = 5;
  return o;
}
}  // namespace

TEST(Jsonl, ImportsUsersDocumentsChunksAndQueries) {
  const std::string text =
      "{\"type\": \"user\", \"user_id\": \"alice\", \"topics\": [\"rehearsal\"]}\n"
      "{\"type\": \"document\", \"user_id\": \"alice\", \"text\": \"one two three four five six seven\"}\n"
      "\n"
      "{\"type\": \"chunk\", \"user_id\": \"alice\", \"text\": \"the rehearsal is on friday\"}\n"
      "{\"type\": \"query\", \"user_id\": \"alice\", \"text\": \"when is the rehearsal?\", \"answer\": \"friday\", "
      "\"arrival_s\": 100, \"relevant_chunks\": [2]}\n"
      "{\"type\": \"query\", \"user_id\": \"alice\", \"text\": \"what comes after six?\", \"arrival_s\": 200.5, "
      "\"kind\": \"email\"}\n"
      "{\"type\": \"chunk\", \"user_id\": \"bob\", \"text\": \"budget approved\"}\n"
      "{\"type\": \"query\", \"user_id\": \"bob\", \"text\": \"was the budget approved?\"}\n";
  const RagTrace t = import_jsonl_text(text, "mem.jsonl", fast_jsonl());
  ASSERT_EQ(t.users.size(), 2u);
  const auto& a = t.users[0];
  EXPECT_EQ(a.user_id, "alice");
  EXPECT_EQ(a.topics, (std::vector<std::string>{"rehearsal"}));
  ASSERT_EQ(a.chunks.size(), 3u);  // document -> 5 + 2 words, then the chunk
  EXPECT_EQ(a.chunks[0].text, "one two three four five");
  EXPECT_EQ(a.chunks[1].text, "six seven");
  ASSERT_EQ(a.queries.size(), 2u);
  EXPECT_EQ(a.queries[0].arrival_s, 100);
  EXPECT_EQ(a.queries[0].relevant, (std::vector<std::int32_t>{2}));
  EXPECT_EQ(a.queries[0].retrieved.front(), 2);  // hybrid retrieval finds the rehearsal chunk
  EXPECT_EQ(a.queries[1].kind, "email");
  EXPECT_EQ(a.queries[0].kind, "query");
  EXPECT_GT(a.queries[0].tokens, 0);
  EXPECT_EQ(a.queries[0].embedding.size(), 512u);
  // bob has no arrival_s: the sparse arrival model (first query during active hours of day 0 or later).
  EXPECT_GE(t.users[1].queries[0].arrival_s, 8 * 3600.0);
  EXPECT_FALSE(t.users[1].idle_windows.empty());
  // Round trip through HDF5.
  const std::string p = trace_testing::temp_dir("jsonl") + "/j.h5";
  write_rag_trace(p, t);
  EXPECT_EQ(read_rag_trace(p).users[0].queries[0].text, "when is the rehearsal?");
}

TEST(Jsonl, MalformedLinesAndBadRecordsAreInputErrorsWithLineNumbers) {
  const auto o = fast_jsonl();
  auto err = [&](const std::string& text) { return error_of([&] { import_jsonl_text(text, "x.jsonl", o); }); };
  EXPECT_NE(err("{\"type\": \"chunk\", \"user_id\": \"a\", \"text\": \"ok\"}\n{\"type\": \"chunk\",\n").find("x.jsonl:2:"),
            std::string::npos);
  EXPECT_NE(err("{\"type\": \"chunk\", \"user_id\": \"a\", \"txt\": \"x\"}").find("unknown key \"txt\""),
            std::string::npos);
  EXPECT_NE(err("{\"type\": \"memo\", \"user_id\": \"a\"}").find("unknown type"), std::string::npos);
  EXPECT_NE(err("{\"type\": \"chunk\", \"text\": \"x\"}").find("missing key \"user_id\""), std::string::npos);
  EXPECT_NE(err("{\"type\": \"chunk\", \"user_id\": \"a\", \"text\": \"x\"}\n"
                "{\"type\": \"query\", \"user_id\": \"a\", \"text\": \"  ?? \"}")
                .find("the query has no text"),
            std::string::npos);
  EXPECT_NE(err("{\"type\": \"chunk\", \"user_id\": \"a\", \"text\": \"x\"}\n"
                "{\"type\": \"query\", \"user_id\": \"a\", \"text\": \"q1\", \"arrival_s\": 50}\n"
                "{\"type\": \"query\", \"user_id\": \"a\", \"text\": \"q2\", \"arrival_s\": 10}")
                .find("earlier"),
            std::string::npos);
  EXPECT_NE(err("{\"type\": \"chunk\", \"user_id\": \"a\", \"text\": \"x\"}\n"
                "{\"type\": \"query\", \"user_id\": \"a\", \"text\": \"q1\", \"relevant_chunks\": [3]}")
                .find("does not exist"),
            std::string::npos);
  // An arrival past the clock's range (here 1e15 s) is refused before it makes a charging window per day.
  EXPECT_NE(err("{\"type\": \"chunk\", \"user_id\": \"a\", \"text\": \"x\"}\n"
                "{\"type\": \"query\", \"user_id\": \"a\", \"text\": \"q1\", \"arrival_s\": 1e15}")
                .find("expected a number of seconds in [0, 3e+09]"),
            std::string::npos);
  EXPECT_NE(err("{\"type\": \"query\", \"user_id\": \"a\", \"text\": \"q1\"}").find("no document or chunk"),
            std::string::npos);
  EXPECT_NE(err("\n  \n").find("no records"), std::string::npos);
  EXPECT_NE(err("[1, 2]").find("expected a JSON object"), std::string::npos);
  EXPECT_THROW(import_jsonl("/nonexistent/file.jsonl", o), InputError);
}

namespace {
QmsumOptions fast_qmsum() {
  QmsumOptions o;
  o.chunk_words = 4;
  return o;
}
}  // namespace

TEST(Qmsum, MeetingBecomesChunksQueriesAndRelevantChunks) {
  const std::string text = R"({
    "topic_list": [{"topic": "Intro", "relevant_text_span": [["0", "1"]]}],
    "general_query_list": [{"query": "Summarize the meeting", "answer": "They met."}],
    "specific_query_list": [
      {"query": "What did B say?", "answer": "B spoke.", "relevant_text_span": [["1", "1"]]},
      {"query": "And C?", "answer": "C too.", "relevant_text_span": [["2", "2"]]}],
    "meeting_transcripts": [
      {"speaker": "A", "content": "hello there everyone"},
      {"speaker": "B", "content": "budget is fine"},
      {"speaker": "C", "content": "ok"}]})";
  const auto doc = json::parse(text, "m.json");
  auto o = fast_qmsum();
  UserTrace u = qmsum_meeting(doc, "m.json", "val/m", o);
  // Words: "A: hello there everyone" (4) | "B: budget is fine" (4) | "C: ok" (2), chunks of 4.
  ASSERT_EQ(u.chunks.size(), 3u);
  EXPECT_EQ(u.chunks[0].text, "A: hello there everyone");
  EXPECT_EQ(u.chunks[2].text, "C: ok");
  EXPECT_EQ(u.topics, (std::vector<std::string>{"Intro"}));
  ASSERT_EQ(u.queries.size(), 3u);
  EXPECT_EQ(u.queries[0].kind, "general");
  EXPECT_EQ(u.queries[1].kind, "specific");
  EXPECT_EQ(u.queries[1].answer_text, "B spoke.");
  EXPECT_EQ(u.queries[1].relevant, (std::vector<std::int32_t>{1}));
  EXPECT_EQ(u.queries[2].relevant, (std::vector<std::int32_t>{2}));
  EXPECT_TRUE(u.queries[0].relevant.empty());
  // Sparse arrivals: increasing, during active hours.
  for (std::size_t i = 1; i < u.queries.size(); ++i) EXPECT_GT(u.queries[i].arrival_s, u.queries[i - 1].arrival_s);
  for (const auto& q : u.queries) {
    const double h = std::fmod(q.arrival_s, 86400.0) / 3600.0;
    EXPECT_GE(h, 8.0);
    EXPECT_LT(h, 22.0);
  }
  bool charging = false;
  for (const auto& w : u.idle_windows) charging = charging || w.charging;
  EXPECT_TRUE(charging);
  o.order = "interleaved";
  u = qmsum_meeting(doc, "m.json", "val/m", o);
  EXPECT_EQ(u.queries[0].kind, "general");
  EXPECT_EQ(u.queries[1].kind, "specific");
  EXPECT_EQ(u.queries[1].text, "What did B say?");
}

TEST(Qmsum, EmptyTranscriptAndEmptyQueryAreInputErrors) {
  auto o = fast_qmsum();
  auto err = [&](const std::string& text) {
    return error_of([&] { qmsum_meeting(json::parse(text, "e.json"), "e.json", "x", o); });
  };
  EXPECT_NE(err(R"({"general_query_list": [], "specific_query_list": [], "meeting_transcripts": []})")
                .find("meeting_transcripts is empty"),
            std::string::npos);
  EXPECT_NE(err(R"({"general_query_list": [], "specific_query_list": [],
                   "meeting_transcripts": [{"speaker": "A", "content": " "}]})")
                .find("no words"),
            std::string::npos);
  const std::string msg = err(R"({"general_query_list": [{"query": "", "answer": "x"}], "specific_query_list": [],
                   "meeting_transcripts": [{"speaker": "A", "content": "hi"}]})");
  EXPECT_NE(msg.find("general_query_list[0].query: the query has no text"), std::string::npos) << msg;
  EXPECT_NE(msg.find("e.json:1:"), std::string::npos) << msg;
  EXPECT_NE(err(R"({"general_query_list": [], "meeting_transcripts": [{"speaker": "A", "content": "hi"}]})")
                .find("missing key \"specific_query_list\""),
            std::string::npos);
  EXPECT_NE(err(R"({"general_query_list": [], "specific_query_list": [],
                   "meeting_transcripts": [{"speaker": "A", "content": 5}]})")
                .find("meeting_transcripts[0].content: expected string, got number"),
            std::string::npos);
}

TEST(Qmsum, ImportsTheRealCorpusWhenPresent) {
  const std::string shared = trace_testing::shared_dir();
  const std::string dir = shared + "/data/qmsum";
  if (shared.empty() || !std::filesystem::is_directory(dir + "/val"))
    GTEST_SKIP() << "QMSum data not found (set MOBISIM_SHARED_DIR to the directory holding data/qmsum)";
  // Query counts straight from the JSON files.
  std::size_t meetings = 0, expected_queries = 0;
  std::vector<std::size_t> per_meeting;
  for (const char* split : {"train", "val"}) {
    std::vector<std::filesystem::path> files;
    for (const auto& e : std::filesystem::directory_iterator(dir + "/" + split)) files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      const auto doc = json::parse(read_file(f.string()), f.string());
      const std::size_t n =
          doc.find("general_query_list")->as_array().size() + doc.find("specific_query_list")->as_array().size();
      per_meeting.push_back(n);
      expected_queries += n;
      ++meetings;
    }
  }
  EXPECT_EQ(meetings, 197u);
  EXPECT_EQ(expected_queries, 1529u);

  QmsumOptions o;
  o.dir = dir;
  o.split = "all";
  o.embed = false;  // counts only: keep the test quick under sanitizers
  o.retrieve_k = 0;
  const RagTrace all = import_qmsum(o);
  ASSERT_EQ(all.users.size(), 197u);
  for (std::size_t i = 0; i < all.users.size(); ++i) {
    EXPECT_EQ(all.users[i].queries.size(), per_meeting[i]) << all.users[i].user_id;
    EXPECT_FALSE(all.users[i].chunks.empty());
  }
  EXPECT_EQ(all.users.front().user_id.rfind("train/", 0), 0u);
  EXPECT_FALSE(all.meta.tokens_exact);

  // The val split with every feature: exact tokens, embeddings, retrieval.
  o.split = "val";
  o.embed = true;
  o.retrieve_k = 3;
  const std::string tok = shared + "/models/llama2-tokenizer.model";
  if (std::filesystem::exists(tok)) o.tokenizer_path = tok;
  const RagTrace val = import_qmsum(o);
  ASSERT_EQ(val.users.size(), 35u);
  EXPECT_EQ(val.meta.tokens_exact, std::filesystem::exists(tok));
  EXPECT_EQ(val.meta.embedding_dim, 512);
  for (const auto& u : val.users)
    for (const auto& q : u.queries) {
      EXPECT_EQ(q.retrieved.size(), 3u);
      EXPECT_GT(q.tokens, 0);
      EXPECT_FALSE(q.answer_text.empty());
    }
  const auto s = compute_stats(val);
  // Real retrieval finds a ground-truth relevant chunk in the top 2 for most specific queries.
  EXPECT_GT(static_cast<double>(s.recall_hits) / static_cast<double>(s.recall_queries), 0.4);
  const std::string p = trace_testing::temp_dir("qmsum") + "/val.h5";
  write_rag_trace(p, val);
  EXPECT_EQ(read_rag_trace(p).users[3].queries.size(), val.users[3].queries.size());
}
