// Progressive graph scheduling (CoordGen 3.2, eqs. 1-2): a small case worked on paper for every
// strategy, greedy vs synchronous and exact vs the rest on random cases, padded G_d executions.
#include <gtest/gtest.h>

#include <cmath>

#include "test_specdec_util.h"
#include "models/model_spec.h"
#include "policies/specdec/graph_schedule.h"
#include "sim/error.h"
#include "sim/rng.h"

namespace mobisim::policies::specdec {
namespace {

ScheduleProblem uniform_problem(int blocks, int chunks, double compute, double load) {
  ScheduleProblem p;
  p.blocks = blocks;
  p.chunks = chunks;
  p.load_s.assign(blocks, load);
  p.prefill_s.assign(blocks, std::vector<double>(chunks, compute));
  p.decode_s = p.prefill_s;
  p.weight_bytes.assign(blocks, 100.0);
  p.other_weight_bytes = 50.0;
  return p;
}

// B = 3 blocks, C = 2 chunks, every block computes in 1 (either graph) and loads in 2.
// Slots: s0 B0c0, s1 B1c0, s2 B2c0, s3 B0c1, s4 B1c1, s5 B2c1.
//  synchronous: prefill [0,6], loads [6,8][8,10][10,12]                        -> 12
//  naive async: B0 loads after s3 [4,6], B1 after s4 queued [6,8], B2 [8,10]   -> 10
//  greedy: after s0 load B0; eq. 2: k = 2 (s1 + s2 = 2 >= 2), load [1,3]; next candidate s2 (B2):
//          load [3,5] (k = 2: s3 + s4); next s4 (B1): load [5,7], no k left. s3, s5 run on G_d
//          right after their loads end (3, 5); prefill ends at 6, switching at 7               -> 7
//  exact: B2 at time 0 [0,2] (B0, B1 compute), B1 after s1 [2,4], B0 after s3 [4,6]            -> 6
TEST(GraphSchedule, SmallCaseWorkedOnPaper) {
  const ScheduleProblem p = uniform_problem(3, 2, 1.0, 2.0);
  const GraphSchedule sync = schedule_synchronous(p);
  EXPECT_DOUBLE_EQ(sync.prefill_end_s, 6);
  EXPECT_DOUBLE_EQ(sync.latency_s(), 12);
  EXPECT_DOUBLE_EQ(sync.exposed_switch_s(p), 6);

  const GraphSchedule naive = schedule_naive_async(p);
  EXPECT_DOUBLE_EQ(naive.latency_s(), 10);
  ASSERT_EQ(naive.loads.size(), 3u);
  EXPECT_DOUBLE_EQ(naive.loads[1].start_s, 6);  // B1 waits for the loader, not for its compute

  const GraphSchedule greedy = schedule_progressive(p);
  EXPECT_EQ(greedy.trigger, (std::vector<int>{1, 5, 3}));
  ASSERT_EQ(greedy.loads.size(), 3u);
  EXPECT_EQ(greedy.loads[0].block, 0);
  EXPECT_DOUBLE_EQ(greedy.loads[0].start_s, 1);
  EXPECT_DOUBLE_EQ(greedy.loads[0].end_s, 3);
  EXPECT_EQ(greedy.loads[0].overlapped_slots, 2);  // the k of eq. 2
  EXPECT_EQ(greedy.loads[1].block, 2);
  EXPECT_DOUBLE_EQ(greedy.loads[1].start_s, 3);
  EXPECT_EQ(greedy.loads[2].block, 1);
  EXPECT_DOUBLE_EQ(greedy.loads[2].end_s, 7);
  EXPECT_DOUBLE_EQ(greedy.prefill_end_s, 6);
  EXPECT_DOUBLE_EQ(greedy.latency_s(), 7);
  // Second chunk: B0 and B2 ran on G_d (sub-chunk repetition), B1 still on G_p.
  EXPECT_TRUE(greedy.computes[3].on_decode_graph);
  EXPECT_FALSE(greedy.computes[4].on_decode_graph);
  EXPECT_TRUE(greedy.computes[5].on_decode_graph);

  const GraphSchedule exact = schedule_exact(p);
  EXPECT_DOUBLE_EQ(exact.latency_s(), 6);
  EXPECT_EQ(exact.evaluated_schedules, 7 * 7 * 7);

  // Memory: one graph per block plus the block being loaded; both graphs resident = 2x block weights.
  EXPECT_DOUBLE_EQ(greedy.peak_npu_bytes, 50 + 300 + 100);
  const GraphSchedule both = schedule_both_resident(p);
  EXPECT_DOUBLE_EQ(both.peak_npu_bytes, 50 + 600);
  EXPECT_DOUBLE_EQ(both.latency_s(), 6);
}

TEST(GraphSchedule, LeastOverlapIsEquationTwo) {
  const std::vector<double> t{5, 1, 2, 3, 4};
  EXPECT_EQ(least_overlap_slots(t, 0, 0.5), 1);
  EXPECT_EQ(least_overlap_slots(t, 0, 3.0), 2);   // 1 + 2 >= 3
  EXPECT_EQ(least_overlap_slots(t, 0, 3.1), 3);   // 1 + 2 + 3
  EXPECT_EQ(least_overlap_slots(t, 2, 7.0), 2);   // 3 + 4
  EXPECT_EQ(least_overlap_slots(t, 2, 7.5), -1);  // not enough compute left
}

TEST(GraphSchedule, LoadNeverOverlapsItsOwnBlock) {
  // One block: its load cannot hide behind anything (it must not overlap its own compute).
  const ScheduleProblem p = uniform_problem(1, 3, 1.0, 2.0);
  for (auto s : {SwitchStrategy::kSynchronous, SwitchStrategy::kNaiveAsync, SwitchStrategy::kProgressive,
                 SwitchStrategy::kExact}) {
    const GraphSchedule g = schedule(p, s);
    EXPECT_DOUBLE_EQ(g.latency_s(), 5) << to_string(s);
  }
}

ScheduleProblem random_problem(sim::Rng& rng, bool decode_as_fast) {
  const int B = 1 + static_cast<int>(rng.uniform_int(4));
  const int C = 1 + static_cast<int>(rng.uniform_int(3));
  ScheduleProblem p = uniform_problem(B, C, 0, 0);
  for (int b = 0; b < B; ++b) {
    p.load_s[b] = rng.uniform(0.1, 5.0);
    for (int c = 0; c < C; ++c) {
      p.prefill_s[b][c] = rng.uniform(0.1, 3.0);
      p.decode_s[b][c] = decode_as_fast ? p.prefill_s[b][c] * rng.uniform(0.5, 1.0)
                                        : p.prefill_s[b][c] * rng.uniform(0.5, 2.0);
    }
  }
  return p;
}

TEST(GraphSchedule, GreedyNeverWorseThanSynchronousWhenDecodeGraphIsNoSlower) {
  // Compute only idles while a load runs, so greedy <= sum(P) + sum(L) = synchronous when
  // G_d prefill is no slower than G_p's (the document: sub-chunks "will not incur much degradation").
  sim::Rng rng(7);
  for (int i = 0; i < 500; ++i) {
    const ScheduleProblem p = random_problem(rng, true);
    EXPECT_LE(schedule_progressive(p).latency_s(), schedule_synchronous(p).latency_s() + 1e-12) << "case " << i;
  }
}

TEST(GraphSchedule, ExactNeverWorseThanAnyOtherStrategy) {
  sim::Rng rng(11);
  for (int i = 0; i < 100; ++i) {
    const ScheduleProblem p = random_problem(rng, false);
    const double exact = schedule_exact(p).latency_s();
    EXPECT_LE(exact, schedule_progressive(p).latency_s() + 1e-12) << "case " << i;
    EXPECT_LE(exact, schedule_synchronous(p).latency_s() + 1e-12) << "case " << i;
    EXPECT_LE(exact, schedule_naive_async(p).latency_s() + 1e-12) << "case " << i;
    // The late-start greedy includes both the document's greedy (start 0) and synchronous (start S).
    const double late = schedule_progressive_late(p).latency_s();
    EXPECT_LE(exact, late + 1e-12) << "case " << i;
    EXPECT_LE(late, schedule_progressive(p).latency_s() + 1e-12) << "case " << i;
    EXPECT_LE(late, schedule_synchronous(p).latency_s() + 1e-12) << "case " << i;
    // Lower bound: the prefill itself (every slot on the faster of the two graphs).
    double lb = 0;
    for (int b = 0; b < p.blocks; ++b)
      for (int c = 0; c < p.chunks; ++c) lb += std::min(p.prefill_s[b][c], p.decode_s[b][c]);
    EXPECT_GE(exact, lb - 1e-12);
  }
}

TEST(GraphSchedule, ExactSearchRefusesHugeInstances) {
  const ScheduleProblem p = uniform_problem(12, 4, 1, 1);
  EXPECT_THROW(schedule_exact(p, 1000), ConfigError);
}

models::ModelSpec tiny_model(int layers) {
  models::ModelSpec m;
  m.name = "tiny";
  m.n_layers = layers;
  m.hidden = 64;
  m.n_heads = 4;
  m.n_kv_heads = 4;
  m.head_dim = 16;
  m.ffn_hidden = 128;
  m.vocab = 100;
  return m;
}

devices::NpuSpec overhead_bound_npu() { return mobisim::testing::one_second_per_execution_npu(); }

devices::ComputeUnitSpec fast_cpu() {
  devices::ComputeUnitSpec c;
  c.peak_tflops[models::DType::kF32] = 1000;
  c.peak_tflops[models::DType::kF16] = 1000;
  c.mem_bandwidth_gbps = 1000;
  return c;
}

TEST(GraphSchedule, PaddedExecutionsCountedAsTheDocumentDescribes) {
  const models::CostModel cost(tiny_model(4));
  const auto npu = overhead_bound_npu();
  // 300 tokens on G_p(256): 2 padded executions per block; G_d(48) repeats ceil(256/48) = 6 times per chunk.
  // The execution overhead is a cost per pass through the whole model (it is fitted to whole-model
  // decode steps): each of the 2 blocks of 2 layers carries half of it, so one chunk through both
  // blocks costs what one whole-model execution costs (1 s), not twice that.
  const ScheduleProblem p = make_schedule_problem(npu, fast_cpu(), cost, 300, GraphShapes{2, 256, 48});
  ASSERT_EQ(p.chunks, 2);
  ASSERT_EQ(p.blocks, 2);
  for (int b = 0; b < 2; ++b) {
    EXPECT_DOUBLE_EQ(p.load_s[b], 1.0);  // 2 layers x 500 ms
    for (int c = 0; c < 2; ++c) {
      EXPECT_NEAR(p.prefill_s[b][c], 0.5, 1e-3);
      EXPECT_NEAR(p.decode_s[b][c], 3.0, 1e-3);
    }
  }
  // The same model cut into 1 and 4 blocks: a chunk through all blocks costs the same.
  for (const int blocks : {1, 4}) {
    const ScheduleProblem q = make_schedule_problem(npu, fast_cpu(), cost, 300, GraphShapes{blocks, 256, 48});
    for (int c = 0; c < 2; ++c) {
      double pre = 0, dec = 0;
      for (int b = 0; b < blocks; ++b) {
        pre += q.prefill_s[b][c];
        dec += q.decode_s[b][c];
      }
      EXPECT_NEAR(pre, 1.0, 1e-3) << blocks << " blocks";
      EXPECT_NEAR(dec, 6.0, 1e-3) << blocks << " blocks";
    }
  }
  // A block's graph holds its layers' weights, adapters included; what is left (embeddings, head) once.
  models::ModelSpec adapted = tiny_model(4);
  adapted.lora_rank = 2;
  const ScheduleProblem a = make_schedule_problem(npu, fast_cpu(), models::CostModel(adapted), 300, GraphShapes{2, 256, 48});
  for (int b = 0; b < 2; ++b)
    EXPECT_DOUBLE_EQ(a.weight_bytes[b] - p.weight_bytes[b], 2 * adapted.lora_bytes_per_layer());
  EXPECT_DOUBLE_EQ(a.other_weight_bytes, p.other_weight_bytes);
  EXPECT_GT(adapted.lora_bytes_per_layer(), 0);
  // run_seconds: n tokens on a chunk-c graph are ceil(n / c) executions.
  const models::Work w = cost.prefill(32, 0);
  EXPECT_NEAR(npu.run_seconds(33, 32, w, models::DType::kF16), 2.0, 1e-3);
  EXPECT_NEAR(npu.run_seconds(32, 32, w, models::DType::kF16), 1.0, 1e-3);
  EXPECT_NEAR(npu.run_seconds(1, 32, w, models::DType::kF16), 1.0, 1e-3);
}

TEST(GraphSchedule, BadShapesGiveClearErrors) {
  const models::CostModel cost(tiny_model(4));
  const auto npu = overhead_bound_npu();
  try {
    make_schedule_problem(npu, fast_cpu(), cost, 300, GraphShapes{2, 32, 64});
    FAIL() << "G_d chunk > G_p chunk accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("larger than the prefill graph"), std::string::npos) << e.what();
  }
  try {
    make_schedule_problem(npu, fast_cpu(), cost, 300, GraphShapes{5, 256, 32});
    FAIL() << "more blocks than layers accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("5 graph blocks for a model of 4 layers"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_switch_strategy("fastest"), ConfigError);
  ScheduleProblem bad = uniform_problem(2, 2, 1, 1);
  bad.load_s[1] = -1;
  EXPECT_THROW(schedule_progressive(bad), InputError);
}

}  // namespace
}  // namespace mobisim::policies::specdec
