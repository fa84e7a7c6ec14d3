// DynaKV's decode step as events on one Device (issue 34, experiments/dynakv_step_events.h): the
// closed form of experiments/dynakv_latency.h is the oracle the events must equal, to the rounding
// of durations to whole nanoseconds; energy is the Device's own accounting. And the storage's
// batched read (Storage::read_batch) those events use, against concurrent reads.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "devices/device.h"
#include "devices/storage.h"
#include "experiments/dynakv_latency.h"
#include "experiments/dynakv_step_events.h"
#include "experiments/simulation.h"
#include "policies/kvcluster/cluster_cache.h"
#include "policies/kvcluster/flash_io.h"
#include "policies/kvcluster/session_replay.h"
#include "sim/event.h"
#include "sim/params.h"
#include "test_kvcluster_util.h"
#include "traces/kv_session.h"

namespace mobisim {
namespace {

using experiments::DecodeStepWork;
using experiments::LayerCompute;
using experiments::LayerFlashWork;
using experiments::StepFlashTimes;

// ---------------------------------------------------------------------------
// Storage::read_batch
// ---------------------------------------------------------------------------
struct BatchOutcome {
  sim::Time end = 0;
  double busy_s = 0, energy_j = 0, bytes_read = 0, commands = 0;
};

sim::Task<void> one_read(devices::Storage& st, double bytes) { co_await st.read(bytes); }

sim::Task<void> concurrent_reads(sim::Simulator& sim, devices::Storage& st, std::vector<double> bytes) {
  std::vector<sim::Event> done;
  for (double b : bytes) done.push_back(sim.start(one_read(st, b)).done_event());
  if (!done.empty()) co_await sim::all_of(sim, done);
}

BatchOutcome run_reads(const devices::StorageSpec& spec, const std::vector<double>& bytes, bool batched,
                       devices::StorageCommandModel model, devices::Storage::Load load = devices::Storage::Load::kPerRequest) {
  sim::Simulator sim;
  sim::StatGroup stats("dev");
  devices::Storage st(sim, spec, "ufs", stats);
  st.set_command_model(model);
  if (batched)
    sim.start(st.read_batch(bytes, "batch", load));
  else
    sim.start(concurrent_reads(sim, st, bytes));
  sim.run();
  BatchOutcome o{sim.now(), st.busy_seconds(), st.io_energy_j(), st.bytes_read(), 0};
  for (const auto& [name, v] : stats.flatten())
    if (name.ends_with("commands")) o.commands = v;
  sim.shutdown();
  return o;
}

// Random batches (single pages to multi-command requests, empty ones) on two phones' flash, with and
// without a per-byte load cost: a batch is the concurrent reads it stands for, in both command models.
TEST(StorageReadBatch, EqualsConcurrentReadsToTheNanosecond) {
  std::mt19937_64 rng(34);
  std::uniform_int_distribution<int> count(0, 60), pages(0, 6), big(0, 400);
  std::bernoulli_distribution rare(0.1);
  for (const char* phone : {"oneplus-12", "midtier-android-ufs21"}) {
    devices::StorageSpec spec = devices::load_device_profile(phone).require_storage("test");
    spec.active_power_w = 0.4;  // so the energy depends on the bus's busy time too
    for (double load : {0.0, 0.37}) {
      spec.load_ns_per_byte = load;
      for (int trial = 0; trial < 30; ++trial) {
        std::vector<double> bytes(static_cast<std::size_t>(count(rng)));
        for (auto& b : bytes) b = 4096.0 * (rare(rng) ? big(rng) : pages(rng));
        for (auto model : {devices::StorageCommandModel::kAnalytic, devices::StorageCommandModel::kPerCommand}) {
          const BatchOutcome a = run_reads(spec, bytes, true, model), b = run_reads(spec, bytes, false, model);
          EXPECT_EQ(a.end, b.end) << phone << " load " << load << " trial " << trial;
          EXPECT_EQ(a.busy_s, b.busy_s);
          EXPECT_EQ(a.energy_j, b.energy_j);
          EXPECT_EQ(a.bytes_read, b.bytes_read);
          EXPECT_EQ(a.commands, b.commands);
        }
      }
    }
  }
}

// Without its load cost (the caller's loading thread pays it), a batch takes what the replay's
// closed form says an idle device takes for the same runs (policies/kvcluster/flash_io.h).
TEST(StorageReadBatch, WithoutLoadCostTakesTheIdleDeviceTime) {
  std::mt19937_64 rng(35);
  std::uniform_int_distribution<int> count(1, 60), pages(1, 40);
  devices::StorageSpec spec = devices::load_device_profile("oneplus-12").require_storage("test");
  spec.load_ns_per_byte = 3.8;
  spec.read_command_overhead_us = 77;
  devices::StorageSpec unloaded = spec;
  unloaded.load_ns_per_byte = 0;
  for (int trial = 0; trial < 40; ++trial) {
    std::vector<double> bytes(static_cast<std::size_t>(count(rng)));
    std::vector<policies::kvcluster::ReadRun> runs;
    for (auto& b : bytes) {
      b = 4096.0 * pages(rng);
      runs.push_back({0, static_cast<std::int64_t>(b), 1, 1, 1});
    }
    for (auto model : {devices::StorageCommandModel::kAnalytic, devices::StorageCommandModel::kPerCommand}) {
      const BatchOutcome a = run_reads(spec, bytes, true, model, devices::Storage::Load::kByCaller);
      EXPECT_EQ(sim::to_seconds(a.end), policies::kvcluster::idle_read_seconds(unloaded, runs)) << trial;
    }
  }
}

// A storage told not to keep request latencies (the DynaKV driver's millions of reads) keeps its
// counters, busy time and energy, and an empty latency histogram.
TEST(StorageReadBatch, WithoutLatencySamplesCountsTheSame) {
  const devices::StorageSpec spec = devices::load_device_profile("oneplus-12").require_storage("test");
  const std::vector<double> bytes = {4096, 65536, 8192, 0, 1e6};
  double mean_latency_ms[2] = {-1, -1};
  BatchOutcome out[2];
  for (int keep = 0; keep < 2; ++keep) {
    sim::Simulator sim;
    sim::StatGroup stats("dev");
    devices::Storage st(sim, spec, "ufs", stats);
    st.keep_request_latencies(keep == 1);
    sim.start(st.read_batch(bytes, "batch"));
    sim.start(st.read(12288));
    sim.run();
    out[keep] = {sim.now(), st.busy_seconds(), st.io_energy_j(), st.bytes_read(), 0};
    for (const auto& [name, v] : stats.flatten())
      if (name.ends_with("request_latency_ms.mean")) mean_latency_ms[keep] = v;
    sim.shutdown();
  }
  EXPECT_EQ(mean_latency_ms[0], 0.0);  // no samples
  EXPECT_GT(mean_latency_ms[1], spec.read_seconds(4096) * 1e3 * 0.99);  // every request takes at least a page's read
  EXPECT_EQ(out[0].end, out[1].end);
  EXPECT_EQ(out[0].busy_s, out[1].busy_s);
  EXPECT_EQ(out[0].energy_j, out[1].energy_j);
  EXPECT_EQ(out[0].bytes_read, 4096 + 65536 + 8192 + 1e6 + 12288);
}

// ---------------------------------------------------------------------------
// The decode step
// ---------------------------------------------------------------------------
struct StepRun {
  sim::Time end = 0;
  double energy_j = 0, cpu_busy_s = 0, storage_busy_s = 0;
  StepFlashTimes flash;
};

StepRun run_step(const devices::DeviceProfile& phone, const DecodeStepWork& work) {
  sim::StatGroup stats("device");
  StepRun out;
  experiments::SimulatedRun run(phone, stats);
  run.device().storage().keep_request_latencies(false);  // as the driver: the step admits its reads
  run.start(experiments::decode_step_on_device(run.device(), work, out.flash), "step");
  run.run();
  out.end = run.sim().now();
  out.energy_j = run.device().energy_j();
  out.cpu_busy_s = run.device().busy_seconds("cpu");
  out.storage_busy_s = run.device().storage().busy_seconds();
  return out;
}

std::vector<policies::kvcluster::ReadRun> as_runs(std::span<const std::int64_t> bytes) {
  std::vector<policies::kvcluster::ReadRun> runs;
  for (std::int64_t b : bytes) runs.push_back({0, b, 1, 1, 1});
  return runs;
}

double copy_seconds(const devices::StorageSpec& spec, std::span<const std::int64_t> runs) {
  std::int64_t bytes = 0;
  for (std::int64_t b : runs) bytes += b;
  return static_cast<double>(bytes) * (spec.load_ns_per_byte * 1e-9);
}

// The oracle: the driver's closed form (before issue 34) for the same work, the replayed layers
// scaled to the model's.
double closed_form_seconds(const devices::StorageSpec& spec, const DecodeStepWork& w) {
  devices::StorageSpec unloaded = spec;
  unloaded.load_ns_per_byte = 0;
  double layers = 0;
  for (const LayerFlashWork& f : w.replayed) {
    const double rep_s = spec.read_seconds(f.representatives_bytes);
    const double io_s = policies::kvcluster::idle_read_seconds(unloaded, as_runs(f.retrieval_runs)) +
                        copy_seconds(spec, f.retrieval_runs);
    const double background_s = policies::kvcluster::idle_read_seconds(unloaded, as_runs(f.prefetch_runs)) +
                                copy_seconds(spec, f.prefetch_runs) + spec.write_seconds(f.write_bytes) +
                                spec.read_seconds(f.moved_bytes);
    layers += experiments::pipelined_layer_seconds(w.compute, w.cluster_s, {rep_s, io_s, background_s});
  }
  return layers * w.model_layers / static_cast<double>(w.replayed.size()) + w.compute.per_token_s;
}

// Durations rounded to whole nanoseconds on a step's path: 4 CPU pieces and up to 4 flash branches'
// (commands, copies) per layer; half a nanosecond each at most, and the closed form's own
// read_seconds/write_seconds are doubles. A bound of a few ns per layer, far below any real change.
sim::Time rounding_bound(const DecodeStepWork& w, const devices::StorageSpec& spec) {
  std::int64_t commands = 0;
  for (const LayerFlashWork& f : w.replayed)
    commands += static_cast<std::int64_t>(std::ceil(f.representatives_bytes / (spec.max_transfer_kb * 1024))) +
                static_cast<std::int64_t>(std::ceil(f.moved_bytes / (spec.max_transfer_kb * 1024))) +
                static_cast<std::int64_t>(std::ceil(spec.written_bytes(f.write_bytes) / (spec.max_transfer_kb * 1024)));
  const auto per_replayed = w.model_layers / static_cast<std::int64_t>(w.replayed.size()) + 1;
  return 8 * w.model_layers + 2 * commands * per_replayed + 2;
}

devices::DeviceProfile phone_with_loader() {
  devices::DeviceProfile p = devices::load_device_profile("oneplus-12");
  p.storage->load_ns_per_byte = 3.81835;  // the dynakv engine's fitted loader (configs/engines/dynakv.yaml)
  p.storage->read_command_overhead_us = 77.406;
  return p;
}

LayerCompute step_compute_ms(double before, double beside, double after, double per_token) {
  LayerCompute c;
  c.before_retrieval_s = before * 1e-3;
  c.beside_retrieval_s = beside * 1e-3;
  c.after_retrieval_s = after * 1e-3;
  c.per_token_s = per_token * 1e-3;
  return c;
}

// CPU alone (no flash work): every layer is its four pieces, end to end, and the Device's energy is
// the CPU active the whole time plus everything else idle plus the SoC floor, by hand.
TEST(DynaKvStepEvents, ComputeOnlyStepByHand) {
  const devices::DeviceProfile phone = devices::load_device_profile("oneplus-12");
  DecodeStepWork w;
  w.compute = step_compute_ms(1, 2, 3, 5);
  w.cluster_s = 0.25e-3;
  w.model_layers = 4;
  w.replayed.resize(2);
  const StepRun r = run_step(phone, w);
  EXPECT_EQ(r.end, sim::from_ms(4 * (1 + 0.25 + 2 + 3) + 5));  // 30 ms
  EXPECT_NEAR(r.cpu_busy_s, 30e-3, 1e-12);
  EXPECT_EQ(r.flash.retrieval + r.flash.background + r.flash.representatives, 0);
  double idle_w = phone.storage->idle_power_w;
  for (const auto& [name, unit] : phone.compute)
    if (name != "cpu") idle_w += unit.idle_power_w;
  if (phone.npu) idle_w += phone.npu->idle_power_w;
  const double cpu_w = phone.compute.at("cpu").active_power_w;
  EXPECT_NEAR(r.energy_j, (phone.base_power_w + cpu_w + idle_w) * 30e-3, 1e-12);
}

// Each max() is a join: flash slower than the CPU beside it sets that phase, faster flash hides.
// Hand-built layers exercise each phase I/O-bound and CPU-bound, on a phone with DynaKV's loader;
// the events equal the closed form to the nanosecond rounding, and the flash branches' times are
// the closed form's idle-device times.
TEST(DynaKvStepEvents, HandBuiltStepsEqualTheClosedForm) {
  const devices::DeviceProfile phone = phone_with_loader();
  const devices::StorageSpec& spec = *phone.storage;
  const std::vector<std::int64_t> few = {4096, 8192, 4096}, many = {65536, 4096, 12288, 4096, 4096, 16384, 8192, 4096};
  const std::vector<std::int64_t> prefetch = {4096, 32768}, none;
  struct Case {
    const char* what;
    LayerCompute compute;
    double cluster_s;
    std::vector<LayerFlashWork> layers;
  };
  const std::vector<Case> cases = {
      {"cpu-bound", step_compute_ms(2, 3, 6, 4), 0.1e-3, {{4096, few, prefetch, 16384, 0}}},
      {"retrieval-bound", step_compute_ms(0.2, 0.05, 6, 4), 0.1e-3, {{512, many, none, 0, 0}, {1024, few, none, 0, 0}}},
      {"representatives-bound", step_compute_ms(0.001, 3, 6, 4), 0, {{2.5e6, few, none, 0, 0}}},
      {"background-bound", step_compute_ms(0.2, 0.5, 0.01, 4), 0.2e-3, {{4096, few, many, 3e6, 65536}, {0, none, prefetch, 0, 0}}},
      {"int4 half-byte representatives", step_compute_ms(0.01, 0.01, 0.01, 1), 0, {{1234.5, many, many, 100, 4096}}},
  };
  for (const Case& c : cases) {
    for (int model_layers : {36, 28}) {
      DecodeStepWork w;
      w.compute = c.compute;
      w.cluster_s = c.cluster_s;
      w.model_layers = model_layers;
      w.replayed = c.layers;
      const StepRun r = run_step(phone, w);
      const double oracle = closed_form_seconds(spec, w);
      EXPECT_NEAR(static_cast<double>(r.end), oracle * 1e9, static_cast<double>(rounding_bound(w, spec)))
          << c.what << ", " << model_layers << " layers";
      // The CPU is busy for its pieces, whatever the flash does, and spins at the joins for the
      // rest of the step: busy from start to end.
      EXPECT_NEAR(r.cpu_busy_s - sim::to_seconds(r.flash.spin_wait),
                  (c.compute.per_layer_s() + c.cluster_s) * model_layers + c.compute.per_token_s,
                  1e-9 * 5 * model_layers)
          << c.what;
      EXPECT_NEAR(r.cpu_busy_s, sim::to_seconds(r.end), 1e-12) << c.what;
    }
  }
}

// Flash-bound phases: the step's latency grows by exactly what the flash takes beyond the CPU
// beside it, and the branch's time is that flash time (summed over the model's layers).
TEST(DynaKvStepEvents, AnIoBoundRetrievalAddsItsExcessEveryLayer) {
  const devices::DeviceProfile phone = phone_with_loader();
  const devices::StorageSpec& spec = *phone.storage;
  devices::StorageSpec unloaded = spec;
  unloaded.load_ns_per_byte = 0;
  const std::vector<std::int64_t> runs = {4096, 8192, 4096, 65536, 4096};
  DecodeStepWork cpu_only;
  cpu_only.compute = step_compute_ms(0.5, 0.01, 1, 2);
  cpu_only.model_layers = 6;
  cpu_only.replayed.resize(1);
  DecodeStepWork with_io = cpu_only;
  with_io.replayed[0].retrieval_runs = runs;
  const sim::Time io = sim::from_seconds(policies::kvcluster::idle_read_seconds(unloaded, as_runs(runs))) +
                       sim::from_seconds(copy_seconds(spec, runs));
  ASSERT_GT(io, sim::from_seconds(with_io.compute.beside_retrieval_s));
  const StepRun a = run_step(phone, cpu_only), b = run_step(phone, with_io);
  EXPECT_EQ(b.end - a.end, 6 * (io - sim::from_seconds(with_io.compute.beside_retrieval_s)));
  EXPECT_EQ(b.flash.retrieval, 6 * io);
  EXPECT_EQ(b.flash.background, 0);
}

// At the joins the compute threads spin on the loading thread's atomic semaphore (seed 003, section
// 7; llama.cpp's ggml_barrier spins the same way): an I/O-bound retrieval keeps the CPU at its active
// power for the whole step. By hand: 6 layers each wait io - beside; the Device's energy is the SoC
// floor and the CPU's active power over the whole step, the other units idle, and the storage's own.
TEST(DynaKvStepEvents, ComputeThreadsSpinAtTheJoinsAtActivePower) {
  const devices::DeviceProfile phone = phone_with_loader();
  const devices::StorageSpec& spec = *phone.storage;
  devices::StorageSpec unloaded = spec;
  unloaded.load_ns_per_byte = 0;
  const std::vector<std::int64_t> runs = {4096, 8192, 4096, 65536, 4096};
  DecodeStepWork w;
  w.compute = step_compute_ms(0.5, 0.01, 1, 2);
  w.model_layers = 6;
  w.replayed.resize(1);
  w.replayed[0].retrieval_runs = runs;
  const sim::Time io = sim::from_seconds(policies::kvcluster::idle_read_seconds(unloaded, as_runs(runs))) +
                       sim::from_seconds(copy_seconds(spec, runs));
  const sim::Time beside = sim::from_seconds(w.compute.beside_retrieval_s);
  ASSERT_GT(io, beside);
  const StepRun r = run_step(phone, w);
  EXPECT_EQ(r.flash.spin_wait, 6 * (io - beside));
  const double step_s = sim::to_seconds(r.end);
  EXPECT_NEAR(step_s, 6 * (0.5e-3 + sim::to_seconds(io) + 1e-3) + 2e-3, 1e-8);  // the retrieval sets its phase
  EXPECT_NEAR(r.cpu_busy_s, step_s, 1e-12);
  double other_idle_w = 0;
  for (const auto& [name, unit] : phone.compute)
    if (name != "cpu") other_idle_w += unit.idle_power_w;
  if (phone.npu) other_idle_w += phone.npu->idle_power_w;
  const double cpu_w = phone.compute.at("cpu").active_power_w;
  sim::StatGroup stats("device");
  experiments::SimulatedRun storage_only(phone, stats);  // the storage's own energy for the same reads
  storage_only.device().storage().keep_request_latencies(false);
  storage_only.device().storage().admit_reads(0, runs, devices::Storage::Load::kByCaller);
  const double storage_io_j = 6 * storage_only.device().storage().io_energy_j();
  const double storage_idle_j = spec.idle_power_w * (step_s - r.storage_busy_s);
  EXPECT_NEAR(r.energy_j, (phone.base_power_w + cpu_w + other_idle_w) * step_s + storage_io_j + storage_idle_j, 1e-9);
}

// Model layer m runs replayed layer floor(m R / N): each of R replayed layers N / R times when R divides N.
TEST(DynaKvStepEvents, ReplayedLayersStandForTheModelsInBlocks) {
  std::vector<int> runs_of(2, 0);
  for (int m = 0; m < 36; ++m) ++runs_of[static_cast<std::size_t>(experiments::replayed_layer_of(m, 36, 2))];
  EXPECT_EQ(runs_of, (std::vector<int>{18, 18}));
  EXPECT_EQ(experiments::replayed_layer_of(17, 36, 2), 0);
  EXPECT_EQ(experiments::replayed_layer_of(18, 36, 2), 1);
  EXPECT_EQ(experiments::replayed_layer_of(35, 36, 1), 0);
}

// The steps of a real replay (DynaKV on a drifting session, two replayed layers, a DRAM cache so that
// prefetches happen): what the replay recorded as requests, run as events, equals the closed form
// the replay's own per-layer times give.
TEST(DynaKvStepEvents, ReplayedStepsEqualTheReplaysClosedForm) {
  const devices::DeviceProfile phone = phone_with_loader();
  traces::DriftingSpec s;
  s.n_layers = 2;
  s.n_kv_heads = 2;
  s.group = 2;
  s.head_dim = 32;
  s.prefill = 128;
  s.decode = 40;
  const traces::KvSession session = traces::generate_drifting_session(s);
  const auto policy = policies::kvcluster::testing::make("{impl: dynakv, top_k_percent: 30}");
  policies::kvcluster::ReplayOptions opt;
  opt.entry_bytes = 2 * 32;
  opt.storage = *phone.storage;
  opt.cache_ratio = 0.8;
  opt.replacement = policies::kvcluster::make_replacement(load_yaml_string("{impl: lru}", "test"), ConfigSource{});
  const auto r = policies::kvcluster::replay_session(session, *policy, opt);
  int prefetching = 0, reading = 0;
  for (const auto& st : r.steps) {
    DecodeStepWork w;
    w.compute = step_compute_ms(0.3, 0.2, 1.1, 2);
    w.cluster_s = 0.01e-3;
    w.model_layers = 36;
    double closed = 0;
    for (int l = 0; l < 2; ++l) {
      const LayerFlashWork f{1000.0 * (l + 1), st.retrieval_runs(l), st.prefetch_runs(l),
                             static_cast<double>(st.layer_write_bytes[l]), static_cast<double>(st.layer_moved_bytes[l])};
      w.replayed.push_back(f);
      // The replay's own timing of the runs it recorded.
      closed += experiments::pipelined_layer_seconds(
          w.compute, w.cluster_s,
          {phone.storage->read_seconds(f.representatives_bytes), st.layer_io_seconds[l],
           st.layer_prefetch_seconds[l] + phone.storage->write_seconds(f.write_bytes) +
               phone.storage->read_seconds(f.moved_bytes)});
      prefetching += !f.prefetch_runs.empty();
      reading += !f.retrieval_runs.empty();
    }
    closed = closed * 18 + w.compute.per_token_s;
    const StepRun e = run_step(phone, w);
    EXPECT_NEAR(static_cast<double>(e.end), closed * 1e9, static_cast<double>(rounding_bound(w, *phone.storage)));
    EXPECT_NEAR(closed_form_seconds(*phone.storage, w), closed, 1e-12);
  }
  EXPECT_GT(prefetching, 10);  // the cache's hits were prefetched
  EXPECT_GT(reading, 40);
}

// The driver keeps one StepRepeats from step to step (Storage::Repeated: a replayed layer's branches
// recorded at its first model layer, replayed at the others). Steps of different flash work in a row
// must time as each step with repeats of its own does: each step forgets the last one's recordings.
sim::Task<void> steps_in_a_row(devices::Device& device, const std::vector<DecodeStepWork>& steps, bool keep,
                               StepFlashTimes& flash) {
  experiments::StepRepeats kept;
  for (const DecodeStepWork& w : steps) {
    if (keep)
      co_await experiments::decode_step_on_device(device, w, flash, kept);
    else
      co_await experiments::decode_step_on_device(device, w, flash);
  }
}

TEST(DynaKvStepEvents, RepeatsKeptFromStepToStepTimeEachStepAsItsOwn) {
  const devices::DeviceProfile phone = phone_with_loader();
  const std::vector<std::int64_t> few = {4096, 8192, 4096}, many = {65536, 4096, 12288, 4096, 4096, 16384, 8192, 4096};
  std::vector<DecodeStepWork> steps;
  for (int k = 0; k < 4; ++k) {
    DecodeStepWork w;
    w.compute = step_compute_ms(0.05, 0.02, 0.05, 1);  // flash-bound: every branch's time shows
    w.cluster_s = 0.01e-3;
    w.model_layers = 6;
    const auto& a = k % 2 ? few : many;
    const auto& b = k % 2 ? many : few;
    w.replayed = {{1000.0 * (k + 1), a, b, 4096.0 * k, 8192.0 * (k % 3)}, {500, few, a, 0, 4096}};
    steps.push_back(w);
  }
  StepRun out[2];
  for (int keep = 0; keep < 2; ++keep) {
    sim::StatGroup stats("device");
    experiments::SimulatedRun run(phone, stats);
    run.device().storage().keep_request_latencies(false);
    run.start(steps_in_a_row(run.device(), steps, keep == 1, out[keep].flash), "steps");
    run.run();
    out[keep].end = run.sim().now();
    out[keep].energy_j = run.device().energy_j();
    out[keep].storage_busy_s = run.device().storage().busy_seconds();
  }
  EXPECT_EQ(out[1].end, out[0].end);
  EXPECT_EQ(out[1].energy_j, out[0].energy_j);
  EXPECT_EQ(out[1].storage_busy_s, out[0].storage_busy_s);
  EXPECT_EQ(out[1].flash.retrieval, out[0].flash.retrieval);
  EXPECT_EQ(out[1].flash.background, out[0].flash.background);
  EXPECT_EQ(out[1].flash.representatives, out[0].flash.representatives);
  // And the steps differ: a step replaying the last one's recordings would show.
  EXPECT_NE(run_step(phone, steps[0]).flash.retrieval, run_step(phone, steps[1]).flash.retrieval);
}

}  // namespace
}  // namespace mobisim
