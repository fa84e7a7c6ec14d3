// Streamed DynaKV sessions (traces/kv_stream.h): a DriftingStream draws the numbers of
// generate_drifting_session, forgets what its readers have passed, and one replay of a stream
// gives, on the way, the replay of every shorter session (policies/kvcluster/session_replay.h).
#include <gtest/gtest.h>

#include "devices/device.h"
#include "policies/kvcluster/flash_io.h"
#include "policies/kvcluster/session_replay.h"
#include "sim/error.h"
#include "sim/rng.h"
#include "test_kvcluster_util.h"
#include "traces/kv_stream.h"

namespace mobisim::policies::kvcluster {
namespace {

using testing::make;

traces::DriftingSpec stream_spec(int head_dim, int decode) {
  traces::DriftingSpec s;
  s.n_layers = 2;
  s.n_kv_heads = 2;
  s.group = 3;
  s.head_dim = head_dim;
  s.prefill = 64;
  s.decode = decode;
  s.birth_every = 16;
  s.query_persistence = 0.5;
  s.query_head_correlation = 0.5;
  return s;
}

bool same_row(const float* a, const float* b, int d) { return std::equal(a, a + d, b); }

TEST(KvStream, DriftingStreamDrawsTheGeneratedSessionAndForgetsWhatItsReadersPassed) {
  // head_dim 16 draws its values by skipping uniforms, 5 (odd) by drawing them: both must leave
  // the random streams where the whole generator leaves them, step after step.
  for (int d : {16, 5}) {
    const auto spec = stream_spec(d, 80);
    const auto whole = traces::generate_drifting_session(spec);
    traces::DriftingStream stream(spec, false);
    ASSERT_EQ(stream.shape().n_heads, whole.n_heads);
    ASSERT_EQ(stream.shape().source, whole.source);
    for (int step = 0; step < spec.decode; step += 7) {
      stream.ensure(step + 1);
      for (int t = 0; t < whole.tables(); ++t)
        EXPECT_TRUE(same_row(stream.key(t, spec.prefill + step), whole.keys[t].row(spec.prefill + step).data(), d))
            << d << " table " << t << " step " << step;
      for (int h = 0; h < whole.n_layers * whole.n_heads; ++h)
        EXPECT_TRUE(same_row(stream.query(h, step), whole.queries[h].row(step).data(), d)) << d << " head " << h;
      stream.release(step + 1);
    }
    // Released keys and queries are gone once they outweigh what is held; kept keys stay.
    stream.ensure(spec.decode);
    stream.release(spec.decode);
    EXPECT_THROW(stream.key(0, 0), Error);
    EXPECT_THROW(stream.query(0, 0), Error);
    traces::DriftingStream kept(spec, true);
    kept.ensure(spec.decode);
    kept.release(spec.decode);
    const auto all = kept.key_rows(1, 0, whole.positions());
    EXPECT_TRUE(all.isApprox(whole.keys[1], 0.0f));
    EXPECT_TRUE(kept.keeps_keys());
  }
}

TEST(KvStream, OneReplayOfAStreamGivesTheReplayOfEveryShorterSession) {
  // Lengths 40, 64 and 96 from one replay of 96 steps, against whole sessions of each length:
  // equal bit for bit, exact attention included (keys kept), for two policies replayed together.
  const auto dynakv = make("{impl: dynakv, top_k_percent: 10}");
  const auto pq = make("{impl: pqcache, top_k_percent: 20}");
  std::vector<ReplayJob> jobs(2);
  jobs[0] = {dynakv.get(), {}};
  jobs[0].options.accuracy_every = 2;
  jobs[0].options.storage = devices::load_device_profile("oneplus-12").require_storage("test");
  jobs[1] = {pq.get(), {}};
  jobs[1].options.accuracy_every = 3;
  jobs[1].options.placement = Placement::kSequence;
  const std::vector<int> lengths = {40, 64, 96};
  traces::DriftingStream stream(stream_spec(16, 96), true);
  const auto streamed = replay_stream(stream, jobs, lengths);
  ASSERT_EQ(streamed.size(), lengths.size());
  for (std::size_t k = 0; k < lengths.size(); ++k) {
    const auto whole = replay_sessions(traces::generate_drifting_session(stream_spec(16, lengths[k])), jobs);
    for (std::size_t j = 0; j < jobs.size(); ++j) {
      const ReplaySummary &a = streamed[k][j], &b = whole[j];
      ASSERT_EQ(a.steps.size(), static_cast<std::size_t>(lengths[k]));
      ASSERT_EQ(a.steps.size(), b.steps.size());
      for (std::size_t i = 0; i < a.steps.size(); ++i) {
        EXPECT_EQ(a.steps[i].read_bytes, b.steps[i].read_bytes);
        EXPECT_EQ(a.steps[i].commands, b.steps[i].commands);
        EXPECT_EQ(a.steps[i].attended, b.steps[i].attended);
        EXPECT_EQ(a.steps[i].io_seconds, b.steps[i].io_seconds);
        EXPECT_EQ(a.steps[i].mass, b.steps[i].mass);
        EXPECT_EQ(a.steps[i].mass_measured, b.steps[i].mass_measured);
      }
      EXPECT_EQ(a.kv_bytes_end, b.kv_bytes_end);
      EXPECT_EQ(a.clusters_end, b.clusters_end);
      EXPECT_EQ(a.mean_variance, b.mean_variance);
      EXPECT_EQ(a.run_count, b.run_count);
      EXPECT_EQ(a.run_entries_sum, b.run_entries_sum);
      EXPECT_EQ(a.run_entries_max, b.run_entries_max);
      EXPECT_EQ(a.flash.physical_write_bytes, b.flash.physical_write_bytes);
      EXPECT_EQ(a.flash.moved_bytes, b.flash.moved_bytes);
      EXPECT_EQ(a.updated_retrieved_within, b.updated_retrieved_within);
      EXPECT_GT(a.run_count, 0);
    }
  }
  // Lengths out of order or past the session are refused.
  traces::DriftingStream again(stream_spec(16, 96), true);
  EXPECT_THROW(replay_stream(again, jobs, {64, 40}), Error);
  EXPECT_THROW(replay_stream(again, jobs, {97}), Error);
}

TEST(KvStream, ExactAttentionRefusesAStreamThatForgetsItsKeys) {
  const auto dynakv = make("{impl: dynakv, top_k_percent: 10}");
  std::vector<ReplayJob> jobs(1);
  jobs[0] = {dynakv.get(), {}};
  jobs[0].options.accuracy_every = 1;
  traces::DriftingStream stream(stream_spec(16, 8), false);
  EXPECT_THROW(replay_stream(stream, jobs, {8}), Error);
}

TEST(KvStream, ClosedFormReadTimeEqualsTheSimulatedDeviceToTheNanosecond) {
  // Random mixes of runs (single pages to multi-command runs past max_transfer_kb, empty runs),
  // with and without a per-byte load cost, on two phones' flash: idle_read_seconds must be the
  // event simulation's time exactly.
  sim::Rng rng(7, 0, "test/kvcluster", "runs");
  for (const char* phone : {"oneplus-12", "midtier-android-ufs21"}) {
    devices::StorageSpec spec = devices::load_device_profile(phone).require_storage("test");
    for (double load : {0.0, 0.37}) {
      spec.load_ns_per_byte = load;
      for (int trial = 0; trial < 40; ++trial) {
        std::vector<ReadRun> runs(rng.uniform_int(80));
        for (auto& r : runs) {
          const auto pages = static_cast<std::int64_t>(rng.bernoulli(0.1) ? rng.uniform_int(400) : rng.uniform_int(6));
          r.offset_bytes = static_cast<std::int64_t>(rng.uniform_int(1 << 20)) * 4096;
          r.bytes = pages * 4096;
        }
        EXPECT_EQ(idle_read_seconds(spec, runs), simulated_read_seconds(spec, runs))
            << phone << " load " << load << " trial " << trial << " (" << runs.size() << " runs)";
      }
    }
  }
}

}  // namespace
}  // namespace mobisim::policies::kvcluster
