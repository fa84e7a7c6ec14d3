#include "experiments/dynakv_step_events.h"

#include <string>

namespace mobisim::experiments {

namespace {

// The unit DynaKV's llama.cpp build decodes on (seed 003, section 7). Labels here stay within the
// short-string buffer: a step issues a few hundred of them.
const std::string kDynaKvCpu = "cpu";
const std::string kSpinLabel = "spin on loader";

// A join: the compute threads spin on the loading thread's atomic semaphore until the flash branch
// ends at `io_end` (experiments/dynakv_step_events.h), so the CPU is busy for that wait.
sim::Task<void> spin_until(devices::Device& device, sim::Time io_end, StepFlashTimes& times) {
  const sim::Time now = device.sim().now();
  if (io_end <= now) co_return;
  times.spin_wait += io_end - now;
  co_await device.busy(kDynaKvCpu, io_end - now, kSpinLabel);
}

// The loading thread's copy of `runs`' bytes into the runtime's KV buffers, one read after another:
// the replay's loading_seconds, to the same double, rounded as a duration.
sim::Time copy_time(const devices::Storage& storage, std::span<const std::int64_t> runs) {
  std::int64_t bytes = 0;
  for (std::int64_t r : runs) bytes += r;
  const double copy_s = static_cast<double>(bytes) * (storage.spec().load_ns_per_byte * 1e-9);
  return copy_s > 0 ? sim::from_seconds(copy_s) : 0;
}

// The flash branches, admitted to the storage when they start (Storage::admit_*): each returns when
// it ends. The step's one process waits for that end after its CPU piece (the join of a max()).
// Every branch starts on an idle storage (the one before has joined), so the repeats of a replayed
// layer replay what its first model layer recorded.

// Reads `runs` together from `at`, then the loading thread copies their bytes: when the copy is done.
sim::Time read_runs_then_copy(devices::Storage& storage, sim::Time at, std::span<const std::int64_t> runs,
                              sim::Time copy, devices::Storage::Repeated& same) {
  if (runs.empty()) return at;
  return storage.admit_reads(at, runs, devices::Storage::Load::kByCaller, same) + copy;
}

// Pipeline 2's flash side: the cached clusters' prefetch (and its copy), then the offload's writes,
// then the pool moves read back, one after another (the closed form's sum).
sim::Time background_io(devices::Storage& storage, sim::Time at, const LayerFlashWork& f, ReplayedLayerRepeats& r) {
  sim::Time t = read_runs_then_copy(storage, at, f.prefetch_runs, r.prefetch_copy, r.prefetch);
  t = storage.admit_write(t, f.write_bytes, r.write);
  return storage.admit_read(t, f.moved_bytes, devices::Storage::Load::kPerRequest, r.moved);
}

// Forgets the last step's recordings and works out this step's copies.
void start_step(const devices::Storage& storage, const DecodeStepWork& step, StepRepeats& repeats) {
  repeats.resize(step.replayed.size());
  for (std::size_t l = 0; l < step.replayed.size(); ++l) {
    ReplayedLayerRepeats& r = repeats[l];
    for (devices::Storage::Repeated* same : {&r.representatives, &r.retrieval, &r.prefetch, &r.write, &r.moved})
      same->reset();
    r.retrieval_copy = copy_time(storage, step.replayed[l].retrieval_runs);
    r.prefetch_copy = copy_time(storage, step.replayed[l].prefetch_runs);
  }
}

}  // namespace

int replayed_layer_of(int m, int model_layers, int replayed_layers) {
  return static_cast<int>(static_cast<std::int64_t>(m) * replayed_layers / model_layers);
}

sim::Task<void> decode_step_on_device(devices::Device& device, const DecodeStepWork& step, StepFlashTimes& times,
                                      StepRepeats& repeats) {
  sim::Simulator& sim = device.sim();
  devices::Storage& storage = device.storage();
  start_step(storage, step, repeats);
  const LayerCompute& c = step.compute;
  const sim::Time before = sim::from_seconds(c.before_retrieval_s), cluster = sim::from_seconds(step.cluster_s),
                  beside = sim::from_seconds(c.beside_retrieval_s), after = sim::from_seconds(c.after_retrieval_s);
  const int replayed = static_cast<int>(step.replayed.size());
  for (int m = 0; m < step.model_layers; ++m) {
    const auto l = static_cast<std::size_t>(replayed_layer_of(m, step.model_layers, replayed));
    const LayerFlashWork& f = step.replayed[l];
    ReplayedLayerRepeats& r = repeats[l];
    // Pipeline 1: the representatives load beside the attention norm, Q projection and RoPE.
    sim::Time t0 = sim.now();
    sim::Time io_end = storage.admit_read(t0, f.representatives_bytes, devices::Storage::Load::kPerRequest, r.representatives);
    times.representatives += io_end - t0;
    co_await device.busy(kDynaKvCpu, before, "norm, Q, RoPE");
    co_await spin_until(device, io_end, times);  // the join
    // The selection needs the query and the representatives: nothing hides it.
    co_await device.busy(kDynaKvCpu, cluster, "clusters");
    // The retrieval depends on this layer's query: only K/V projections and Q-K scores hide it.
    t0 = sim.now();
    io_end = read_runs_then_copy(storage, t0, f.retrieval_runs, r.retrieval_copy, r.retrieval);
    times.retrieval += io_end - t0;
    co_await device.busy(kDynaKvCpu, beside, "K/V proj, Q-K");
    co_await spin_until(device, io_end, times);  // the join
    // Pipeline 2: the next layer's cached clusters and this layer's writes beside attention and FFN.
    t0 = sim.now();
    io_end = background_io(storage, t0, f, r);
    times.background += io_end - t0;
    co_await device.busy(kDynaKvCpu, after, "softmax, O, FFN");
    co_await spin_until(device, io_end, times);  // the join
  }
  co_await device.busy(kDynaKvCpu, sim::from_seconds(c.per_token_s), "embed, LM head");
}

sim::Task<void> decode_step_on_device(devices::Device& device, const DecodeStepWork& step, StepFlashTimes& times) {
  StepRepeats repeats;
  co_await decode_step_on_device(device, step, times, repeats);
}

}  // namespace mobisim::experiments
