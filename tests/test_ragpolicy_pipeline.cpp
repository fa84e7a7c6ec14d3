// RAG pipeline pieces around late chunks (Chunk::added_s): the trace field and its file format,
// the generator option, retrieval that only sees chunks already added, and PerCache's dynamic
// refresh (section 4.1.3) in idle time.
#include <gtest/gtest.h>

#include <filesystem>

#include "sim/error.h"
#include "sim/h5.h"
#include "test_percache_util.h"
#include "traces/rag_trace_io.h"

using namespace mobisim;
using namespace mobisim::policies;
using namespace mobisim::policies::testing;

namespace {

const char* kLate = "users: 2\nknowledge: {late_fraction: 0.2}";

traces::UserTrace three_chunks() {
  traces::UserTrace u;
  u.user_id = "u";
  for (int i = 0; i < 3; ++i) {
    traces::Chunk c;
    c.text = "chunk";
    c.tokens = 100;
    c.embedding = {i == 0 ? 1.0f : 0.0f, i == 1 ? 1.0f : 0.0f, i == 2 ? 1.0f : 0.0f};
    u.chunks.push_back(c);
  }
  u.chunks[0].added_s = 100;  // the best match arrives at t = 100 s
  return u;
}

sim::Task<void> wait_then(sim::Simulator& sim, double s, std::function<void()> f) {
  co_await sim.timeout(sim::from_seconds(s));
  f();
}

std::string temp_file(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / "mobisim_ragpolicy_tests";
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

}  // namespace

TEST(RagPolicyRetrieval, OnlyChunksAlreadyAddedAreRetrieved) {
  const auto user = three_chunks();
  const models::CostModel cost(llama_fp32_act());
  sim::Simulator sim;
  sim::StatGroup stats("test");
  devices::Device device(sim, devices::load_device_profile("pixel7"), stats.child("device"));
  PipelineConfig cfg = table1_pipeline();
  cfg.top_k = 2;
  RagPipeline pipe(sim, device, cost, cfg, user, stats);
  traces::Query q;
  q.embedding = {0.9f, 0.1f, 0.0f};  // chunk 0 first, then chunk 1
  traces::Query pre = q;
  pre.retrieved = {0, 1, 2};  // a precomputed list is filtered the same way
  EXPECT_EQ(pipe.retrieved_chunks(q), (std::vector<std::int32_t>{1, 2}));
  EXPECT_EQ(pipe.retrieved_chunks(pre), (std::vector<std::int32_t>{1, 2}));
  std::vector<std::int32_t> later, later_pre;
  sim.start(wait_then(sim, 100.0,
                      [&] {
                        later = pipe.retrieved_chunks(q);
                        later_pre = pipe.retrieved_chunks(pre);
                      }),
            "wait");
  sim.run();
  EXPECT_EQ(later, (std::vector<std::int32_t>{0, 1}));
  EXPECT_EQ(later_pre, (std::vector<std::int32_t>{0, 1}));
}

TEST(RagPolicyTrace, LateChunksRoundTripAndStampVersion2) {
  auto t = generated(kLate);
  ASSERT_EQ(t.users[0].chunks.size(), 120u);  // 100 + 20% late
  EXPECT_EQ(traces::rag_schema_version_needed(t), 2);
  const std::string path = temp_file("late.h5");
  traces::write_rag_trace(path, t);
  const auto back = traces::read_rag_trace(path);
  EXPECT_EQ(back.meta.schema_version, 2);
  for (std::size_t u = 0; u < t.users.size(); ++u)
    for (std::size_t c = 0; c < t.users[u].chunks.size(); ++c)
      EXPECT_EQ(back.users[u].chunks[c].added_s, t.users[u].chunks[c].added_s);
  // Without late chunks: version 1 and no added_s dataset (what older mobisim wrote and reads).
  const auto plain = generated("users: 1");
  const std::string p1 = temp_file("plain.h5");
  traces::write_rag_trace(p1, plain);
  EXPECT_FALSE(h5::Reader(p1).exists("/users/u00000/chunks/added_s"));
  const auto b1 = traces::read_rag_trace(p1);
  EXPECT_EQ(b1.meta.schema_version, 1);
  for (const auto& c : b1.users[0].chunks) EXPECT_EQ(c.added_s, 0.0);
  // A query that retrieved a chunk before it was added is inconsistent.
  auto bad = t;
  auto& u0 = bad.users[0];
  const std::int32_t late = 100;
  u0.queries[0].retrieved = {late};
  ASSERT_GT(u0.chunks[static_cast<std::size_t>(late)].added_s, u0.queries[0].arrival_s);
  EXPECT_THROW(traces::write_rag_trace(temp_file("bad.h5"), bad), Error);
}

TEST(RagPolicyTrace, GeneratorLateFractionAddsUpdatesOverTheTraceAndRetrievesOnlyAddedChunks) {
  const auto t = generated(kLate);
  const auto plain = generated("users: 2");
  for (std::size_t u = 0; u < t.users.size(); ++u) {
    const auto& lu = t.users[u];
    const auto& pu = plain.users[u];
    // The initial chunks and the query texts are those of the default output.
    for (std::size_t c = 0; c < 100; ++c) {
      EXPECT_EQ(lu.chunks[c].text, pu.chunks[c].text);
      EXPECT_EQ(lu.chunks[c].added_s, 0.0);
    }
    for (std::size_t q = 0; q < lu.queries.size(); ++q) {
      EXPECT_EQ(lu.queries[q].text, pu.queries[q].text);
      EXPECT_EQ(lu.queries[q].arrival_s, pu.queries[q].arrival_s);
    }
    const double t0 = lu.queries.front().arrival_s, t1 = lu.queries.back().arrival_s;
    std::size_t retrieved_late = 0;
    for (std::size_t c = 100; c < lu.chunks.size(); ++c) {
      EXPECT_GE(lu.chunks[c].added_s, t0);
      EXPECT_LE(lu.chunks[c].added_s, t1);
    }
    for (const auto& q : lu.queries) {
      EXPECT_EQ(q.retrieved.size(), 3u);
      for (auto c : q.retrieved) {
        EXPECT_LE(lu.chunks[static_cast<std::size_t>(c)].added_s, q.arrival_s);
        retrieved_late += c >= 100;
      }
    }
    EXPECT_GT(retrieved_late, 0u) << "updates of hot chunks are retrieved by later queries";
  }
  // The option is validated.
  EXPECT_THROW(generated("knowledge: {late_fraction: -0.1}"), ConfigError);
}

TEST(RagPolicyRefresh, NewChunksRefreshAffectedQaEntriesInIdleTime) {
  const auto t = generated(kLate);
  std::int64_t refreshed = 0, stale_on = 0, stale_off = 0;
  double bg_on = 0, bg_off = 0;
  for (std::size_t u = 0; u < t.users.size(); ++u) {
    const auto on = run_user("{impl: percache, knowledge_type: personal notes}", t, u);
    const auto off = run_user("{impl: percache, knowledge_type: personal notes, refresh: false}", t, u);
    refreshed += on.caching().refreshes();
    EXPECT_EQ(off.caching().refreshes(), 0);
    for (const auto& r : on.records) {
      EXPECT_NEAR(r.start_s, r.arrival_s, 1e-6) << "refresh never delays a query";
      stale_on += r.qa_stale;
      bg_on += r.bg_flops;
    }
    for (const auto& r : off.records) {
      stale_off += r.qa_stale;
      bg_off += r.bg_flops;
    }
    // Refreshed entries now carry the new chunks' retrieval time.
    for (const auto& e : on.caching().qa_bank()->entries())
      if (e.refreshes > 0) {
        EXPECT_GT(e.chunks_at_s, 0.0);
      }
  }
  EXPECT_GT(refreshed, 0);
  EXPECT_GT(bg_on, bg_off);        // the refresh is charged (idle-time FLOPs)
  EXPECT_GT(stale_off, 0);         // without refresh, QA hits are served from stale entries
  EXPECT_LT(stale_on, stale_off);  // refresh removes (most of) them
}
