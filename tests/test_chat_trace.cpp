// Chat-session traces (traces/chat_trace.h, traces/SCHEMA.md): round trip, the
// generator <-> trace converter, bad files, `mobisim trace generate-chat`, and
// the prefix_cache experiment replaying a trace to the generator's numbers.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "experiments/experiment.h"
#include "policies/kvcache/chat_workload.h"
#include "sim/error.h"
#include "sim/h5.h"
#include "sim/params.h"
#include "test_util.h"
#include "traces/chat_trace.h"

namespace mobisim {
namespace {

using testing::TempDir;
using traces::ChatTrace;
namespace kc = policies::kvcache;

ChatTrace sample_trace() {
  ChatTrace t;
  t.source = "test";
  t.tokenizer = "synthetic:uniform-ids";
  t.vocab = 100;
  t.system_prompts = 2;
  t.params_yaml = "a: 1\n";
  traces::ChatSessionTrace a;
  a.session_id = "chat-a";
  a.user_id = "alice";
  a.system_prompt_variant = 1;
  a.turns = {{"system", "You are helpful.", 4, 10.0, 0},
             {"context", "Alice likes tea.", 2, 10.0, 0},
             {"user", "Hi", 1, 10.0, 0},
             {"assistant", "Hello!", 2, 10.5, 0},
             {"user", "Tea?", 1, 30.25, 7}};
  a.prompt_token_ids = {1, 2, 3, 4, 50, 51, 60, 70, 71, 61};
  traces::ChatSessionTrace b;
  b.session_id = "chat-b";
  b.user_id = "bob";
  b.system_prompt_variant = -1;
  b.turns = {{"system", "", 3, 20.0, 0}, {"user", "", 2, 20.0, 0}};
  b.prompt_token_ids = {9, 8, 7, 99, 0};
  t.sessions = {a, b};
  return t;
}

void expect_equal(const ChatTrace& x, const ChatTrace& y) {
  EXPECT_EQ(x.schema_version, y.schema_version);
  EXPECT_EQ(x.source, y.source);
  EXPECT_EQ(x.tokenizer, y.tokenizer);
  EXPECT_EQ(x.vocab, y.vocab);
  EXPECT_EQ(x.system_prompts, y.system_prompts);
  EXPECT_EQ(x.params_yaml, y.params_yaml);
  ASSERT_EQ(x.sessions.size(), y.sessions.size());
  for (std::size_t i = 0; i < x.sessions.size(); ++i) {
    const auto &a = x.sessions[i], &b = y.sessions[i];
    EXPECT_EQ(a.session_id, b.session_id);
    EXPECT_EQ(a.user_id, b.user_id);
    EXPECT_EQ(a.system_prompt_variant, b.system_prompt_variant);
    EXPECT_EQ(a.prompt_token_ids, b.prompt_token_ids);
    ASSERT_EQ(a.turns.size(), b.turns.size());
    for (std::size_t k = 0; k < a.turns.size(); ++k) {
      EXPECT_EQ(a.turns[k].role, b.turns[k].role);
      EXPECT_EQ(a.turns[k].text, b.turns[k].text);
      EXPECT_EQ(a.turns[k].tokens, b.turns[k].tokens);
      EXPECT_EQ(a.turns[k].arrival_s, b.turns[k].arrival_s);
      EXPECT_EQ(a.turns[k].prefix_tokens, b.turns[k].prefix_tokens);
    }
  }
}

// Edits re-seal the digest, so the reader's checks behind it are reached.
void set_root_attr(const std::string& path, const std::string& name, std::int64_t v) {
  {
    H5::H5File f(path, H5F_ACC_RDWR);
    h5::write_attr(f.openGroup("/"), name, v);
  }
  h5::reseal(path);
}

// Replaces a 1-D int32 dataset of an existing file.
void replace_ints(const std::string& path, const std::string& group, const std::string& name,
                  const std::vector<std::int32_t>& v) {
  {
    H5::H5File f(path, H5F_ACC_RDWR);
    H5::Group g = f.openGroup(group);
    g.unlink(name);
    h5::write_dataset(g, name, v);
  }
  h5::reseal(path);
}

template <class F>
std::string input_error_of(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an InputError";
  return "";
}

TEST(ChatTrace, RoundTripKeepsEveryField) {
  TempDir d("chat-rt");
  const ChatTrace t = sample_trace();
  traces::write_chat_trace(d.file("t.h5"), t);
  const ChatTrace r = traces::read_chat_trace(d.file("t.h5"));
  expect_equal(t, r);
  EXPECT_EQ(r.sessions[0].system_tokens(), 4);
  // The same trace gives the same bytes.
  traces::write_chat_trace(d.file("u.h5"), t);
  EXPECT_EQ(testing::read_bytes(d.file("t.h5")), testing::read_bytes(d.file("u.h5")));
}

TEST(ChatTrace, RequestsOfATraceAreItsUserTurnsInArrivalOrder) {
  const auto s = kc::sessions_from_chat_trace(sample_trace());
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].arrival_s, 10.0);
  EXPECT_EQ(s[0].tokens, (std::vector<std::int32_t>{1, 2, 3, 4, 50, 51, 60}));
  EXPECT_EQ(s[0].system_tokens, 4);
  EXPECT_EQ(s[0].context_tokens, 2);
  EXPECT_EQ(s[0].history_tokens, 0);
  EXPECT_EQ(s[0].user_tokens, 1);
  EXPECT_EQ(s[1].arrival_s, 20.0);  // bob's request comes between alice's two
  EXPECT_EQ(s[1].variant, -1);
  EXPECT_EQ(s[2].arrival_s, 30.25);
  EXPECT_EQ(s[2].tokens.size(), 10u);
  EXPECT_EQ(s[2].history_tokens, 3);  // the first exchange (user 1 + assistant 2)
  EXPECT_EQ(s[2].variant, 1);
}

TEST(ChatTrace, GeneratorSessionsSurviveTheTrace) {
  TempDir d("chat-gen");
  kc::ChatWorkloadConfig cfg;
  cfg.sessions = 80;
  cfg.context_tokens_median = 0;  // some sessions without context turns as well
  for (double ctx_median : {0.0, 24.0}) {
    cfg.context_tokens_median = ctx_median;
    const auto gen = kc::generate_chat_sessions(cfg, 3, 0);
    traces::write_chat_trace(d.file("g.h5"), kc::to_chat_trace(gen, cfg, "generator", ""));
    const ChatTrace t = traces::read_chat_trace(d.file("g.h5"));
    EXPECT_EQ(t.vocab, cfg.vocab);
    EXPECT_EQ(t.system_prompts, cfg.system_prompts);
    const auto back = kc::sessions_from_chat_trace(t);
    ASSERT_EQ(back.size(), gen.size());
    for (std::size_t i = 0; i < gen.size(); ++i) {
      EXPECT_EQ(back[i].arrival_s, gen[i].arrival_s);
      EXPECT_EQ(back[i].variant, gen[i].variant);
      EXPECT_EQ(back[i].system_tokens, gen[i].system_tokens);
      EXPECT_EQ(back[i].context_tokens, gen[i].context_tokens);
      EXPECT_EQ(back[i].history_tokens, gen[i].history_tokens);
      EXPECT_EQ(back[i].user_tokens, gen[i].user_tokens);
      EXPECT_EQ(back[i].tokens, gen[i].tokens);
    }
  }
}

TEST(ChatTrace, WriterRejectsInconsistentTraces) {
  TempDir d("chat-bad");
  ChatTrace t = sample_trace();
  t.sessions[0].prompt_token_ids.pop_back();  // turns sum to 10
  EXPECT_THROW(traces::write_chat_trace(d.file("t.h5"), t), Error);
  t = sample_trace();
  t.sessions[0].turns[4].arrival_s = 1.0;  // earlier than the previous turn
  EXPECT_THROW(traces::write_chat_trace(d.file("t.h5"), t), Error);
  t = sample_trace();
  t.sessions[1].prompt_token_ids[0] = 100;  // vocab is 100
  EXPECT_THROW(traces::write_chat_trace(d.file("t.h5"), t), Error);
  t = sample_trace();
  t.sessions[0].turns[0].role = "robot";
  EXPECT_THROW(traces::write_chat_trace(d.file("t.h5"), t), Error);
  EXPECT_FALSE(std::filesystem::exists(d.file("t.h5")));
}

TEST(ChatTrace, NewerOrDraftVersionIsAnInputError) {
  TempDir d("chat-ver");
  const std::string p = d.file("t.h5");
  traces::write_chat_trace(p, sample_trace());
  set_root_attr(p, "schema_version", traces::kChatSchemaVersion + 1);
  const std::string e = input_error_of([&] { traces::read_chat_trace(p); });
  EXPECT_NE(e.find("newer"), std::string::npos) << e;
  EXPECT_NE(e.find(p), std::string::npos) << e;
  set_root_attr(p, "schema_version", 0);
  EXPECT_THROW(traces::read_chat_trace(p), InputError);
}

TEST(ChatTrace, TruncatedMissingAndForeignFilesAreInputErrors) {
  TempDir d("chat-trunc");
  const std::string p = d.file("t.h5");
  traces::write_chat_trace(p, sample_trace());
  const std::string bytes = testing::read_bytes(p);
  for (std::size_t keep : {bytes.size() / 2, bytes.size() - 1, std::size_t{100}, std::size_t{0}}) {
    const std::string q = d.file("cut.h5");
    std::ofstream(q, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(keep));
    EXPECT_THROW(traces::read_chat_trace(q), InputError) << "kept " << keep << " bytes";
  }
  EXPECT_THROW(traces::read_chat_trace(d.file("missing.h5")), InputError);
  {
    h5::Writer w(d.file("rag.h5"));
    h5::write_attr(w.root(), "format", "mobisim-rag-trace");
    h5::write_attr(w.root(), "schema_version", std::int64_t{1});
    w.commit();
  }
  const std::string e = input_error_of([&] { traces::read_chat_trace(d.file("rag.h5")); });
  EXPECT_NE(e.find("not a mobisim chat trace"), std::string::npos) << e;
}

TEST(ChatTrace, WrongShapesAndRangesAreInputErrorsNamingTheObject) {
  TempDir d("chat-shape");
  const std::string p = d.file("t.h5");
  // A turns column one element short.
  traces::write_chat_trace(p, sample_trace());
  replace_ints(p, "/chat_sessions/s00000/turns", "prefix_tokens", {0, 0, 0, 0});
  std::string e = input_error_of([&] { traces::read_chat_trace(p); });
  EXPECT_NE(e.find("/chat_sessions/s00000/turns/prefix_tokens"), std::string::npos) << e;
  // Token ids that do not add up to the turns.
  traces::write_chat_trace(p, sample_trace());
  replace_ints(p, "/chat_sessions/s00001/prompt", "token_ids", {1, 2, 3});
  e = input_error_of([&] { traces::read_chat_trace(p); });
  EXPECT_NE(e.find("s00001/prompt/token_ids"), std::string::npos) << e;
  // A token id outside the vocabulary.
  traces::write_chat_trace(p, sample_trace());
  replace_ints(p, "/chat_sessions/s00001/prompt", "token_ids", {1, 2, 3, 4, 100});
  e = input_error_of([&] { traces::read_chat_trace(p); });
  EXPECT_NE(e.find("vocab"), std::string::npos) << e;
  // A 2-D turns dataset.
  traces::write_chat_trace(p, sample_trace());
  {
    H5::H5File f(p, H5F_ACC_RDWR);
    H5::Group g = f.openGroup("/chat_sessions/s00001/turns");
    g.unlink("tokens");
    h5::write_matrix(g, "tokens", {3, 0, 2, 0}, 2, 2);
  }
  h5::reseal(p);
  e = input_error_of([&] { traces::read_chat_trace(p); });
  EXPECT_NE(e.find("turns/tokens"), std::string::npos) << e;
  // Sessions out of arrival order, and num_sessions disagreeing with the groups.
  ChatTrace t = sample_trace();
  std::swap(t.sessions[0], t.sessions[1]);
  t.sessions[0].turns[0].arrival_s = t.sessions[0].turns[1].arrival_s = 20.0;
  EXPECT_THROW(traces::write_chat_trace(p, t), Error);
  traces::write_chat_trace(p, sample_trace());
  set_root_attr(p, "num_sessions", 3);
  EXPECT_THROW(traces::read_chat_trace(p), InputError);
}

TEST(ChatTrace, GenerateChatCliIsDeterministic) {
  TempDir d("chat-cli");
  auto gen = [&](const std::string& out, const std::string& extra) {
    const auto r = testing::run_mobisim("trace generate-chat --out '" + out + "' -p sessions=50 " + extra);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return testing::read_bytes(out);
  };
  const std::string a = gen(d.file("a.h5"), "--seed 7"), b = gen(d.file("b.h5"), "--seed 7");
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(a, b);
  EXPECT_NE(gen(d.file("c.h5"), "--seed 8"), a);
  const ChatTrace t = traces::read_chat_trace(d.file("a.h5"));
  EXPECT_EQ(t.sessions.size(), 50u);
  EXPECT_NE(t.source.find("seed=7"), std::string::npos) << t.source;
  EXPECT_NE(t.params_yaml.find("sessions: 50"), std::string::npos) << t.params_yaml;
  // With a config file; unknown keys are errors naming the key.
  testing::write_text(d.file("cfg.yaml"), "sessions: 20\nsystem_prompts: 3\nvariant_diverge_at: [40, 100]\n");
  auto r = testing::run_mobisim("trace generate-chat '" + d.file("cfg.yaml") + "' --out '" + d.file("d.h5") + "'");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(traces::read_chat_trace(d.file("d.h5")).system_prompts, 3);
  testing::write_text(d.file("bad.yaml"), "sessionz: 20\n");
  r = testing::run_mobisim("trace generate-chat '" + d.file("bad.yaml") + "' --out '" + d.file("e.h5") + "'");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("sessionz"), std::string::npos) << r.output;
  r = testing::run_mobisim("trace generate-chat --help");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("--out"), std::string::npos) << r.output;
  r = testing::run_mobisim("trace --help");
  EXPECT_NE(r.output.find("generate-chat"), std::string::npos) << r.output;
}

std::string run_ttft(const std::string& out, const std::vector<std::string>& overrides) {
  experiments::RunOptions o;
  o.output_override = out;
  o.no_plot = true;
  o.quiet = true;
  o.overrides = overrides;
  EXPECT_EQ(experiments::run_experiment_file(std::string(MOBISIM_SOURCE_DIR) + "/experiments/prefix_cache/ttft.yaml", o),
            0);
  return out;
}

TEST(ChatTrace, PrefixCacheExperimentFromTraceMatchesTheGenerator) {
  TempDir d("chat-exp");
  // The trace: ttft.yaml's workload keys, 150 sessions, the experiment's seed (1, run 0).
  YAML::Node root = load_yaml_file(std::string(MOBISIM_SOURCE_DIR) + "/experiments/prefix_cache/ttft.yaml");
  ASSERT_EQ(root["seed"].as<int>(), 1);
  testing::write_text(d.file("workload.yaml"), yaml_to_string(root["experiment"]["workload"]) + "\n");
  const auto r = testing::run_mobisim("trace generate-chat '" + d.file("workload.yaml") + "' --out '" +
                                      d.file("chat.h5") + "' --seed 1 -p sessions=150");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  run_ttft(d.file("gen.h5"), {"experiment.workload.sessions=150"});
  run_ttft(d.file("trace.h5"), {"experiment.workload={trace: '" + d.file("chat.h5") + "'}"});
  h5::Reader g(d.file("gen.h5")), t(d.file("trace.h5"));
  EXPECT_EQ(g.strings("summary/device"), t.strings("summary/device"));
  EXPECT_EQ(g.strings("summary/policy"), t.strings("summary/policy"));
  const auto sessions = t.ints("summary/sessions");
  ASSERT_FALSE(sessions.empty());
  EXPECT_EQ(sessions[0], 150);
  for (const char* c : {"sessions", "full_hits", "partial_hits", "misses", "verify_mismatches", "evictions"})
    EXPECT_EQ(g.ints(std::string("summary/") + c), t.ints(std::string("summary/") + c)) << c;
  for (const char* c : {"median_ttft_ms", "median_ttft_full_hit_ms", "median_uncached_ttft_ms", "speedup_median",
                        "mean_load_full_hit_ms", "partial_recovery", "cache_used_mb"}) {
    const auto a = g.doubles(std::string("summary/") + c), b = t.doubles(std::string("summary/") + c);
    ASSERT_EQ(a.size(), b.size()) << c;
    for (std::size_t i = 0; i < a.size(); ++i)
      EXPECT_TRUE(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i]))) << c << "[" << i << "]: " << a[i] << " vs " << b[i];
  }
}

TEST(ChatTrace, WorkloadWithTraceAndGeneratorKeysIsAConfigError) {
  experiments::RunOptions o;
  o.no_plot = true;
  o.quiet = true;
  o.validate_only = true;
  // ttft.yaml sets generator keys; adding a trace gives both.
  o.overrides = {"experiment.workload.trace=/nonexistent/chat.h5"};
  try {
    experiments::run_experiment_file(std::string(MOBISIM_SOURCE_DIR) + "/experiments/prefix_cache/ttft.yaml", o);
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("workload"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("exactly one"), std::string::npos) << e.what();
  }
  // A trace alone that does not exist: an InputError naming the file.
  o.overrides = {"experiment.workload={trace: /nonexistent/chat.h5}"};
  try {
    experiments::run_experiment_file(std::string(MOBISIM_SOURCE_DIR) + "/experiments/prefix_cache/ttft.yaml", o);
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/chat.h5"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mobisim
