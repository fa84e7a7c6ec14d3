#include "experiments/dynakv_step_events.h"

#include <string>
#include <utility>

#include "sim/event.h"

namespace mobisim::experiments {

namespace {

// The unit DynaKV's llama.cpp build decodes on (seed 003, section 7). Labels here stay within the
// short-string buffer: a step issues a few hundred of them.
const std::string kDynaKvCpu = "cpu";

// Reads `runs` together, then the loading thread copies their bytes into the runtime's KV buffers,
// one read after another; adds the branch's time to `took`.
sim::Task<void> read_runs_then_copy(sim::Simulator& sim, devices::Storage& storage, std::span<const std::int64_t> runs,
                                    sim::Time& took) {
  const sim::Time t0 = sim.now();
  std::vector<double> requests;
  requests.reserve(runs.size());
  std::int64_t bytes = 0;
  for (std::int64_t r : runs) {
    requests.push_back(static_cast<double>(r));
    bytes += r;
  }
  co_await storage.read_batch(std::move(requests), "kv runs", devices::Storage::Load::kByCaller);
  // The replay's loading_seconds, to the same double.
  const double copy_s = static_cast<double>(bytes) * (storage.spec().load_ns_per_byte * 1e-9);
  if (copy_s > 0) co_await sim.timeout(sim::from_seconds(copy_s));
  took += sim.now() - t0;
}

sim::Task<void> read_representatives(sim::Simulator& sim, devices::Storage& storage, double bytes, sim::Time& took) {
  const sim::Time t0 = sim.now();
  std::vector<double> request(1, bytes);  // one read (a named vector: g++ 12 cannot brace-initialise it in co_await)
  co_await storage.read_batch(std::move(request), "reps");
  took += sim.now() - t0;
}

// Pipeline 2's flash side: the cached clusters' prefetch (and its copy), then the offload's writes,
// then the pool moves read back, one after another (the closed form's sum).
sim::Task<void> background_io(sim::Simulator& sim, devices::Storage& storage, const LayerFlashWork& f, sim::Time& took) {
  const sim::Time t0 = sim.now();
  sim::Time unused = 0;
  if (!f.prefetch_runs.empty()) co_await read_runs_then_copy(sim, storage, f.prefetch_runs, unused);
  if (f.write_bytes > 0) co_await storage.write(f.write_bytes, "kv offload");
  if (f.moved_bytes > 0) {
    std::vector<double> request(1, f.moved_bytes);
    co_await storage.read_batch(std::move(request), "pool move");
  }
  took += sim.now() - t0;
}

bool has_background(const LayerFlashWork& f) { return !f.prefetch_runs.empty() || f.write_bytes > 0 || f.moved_bytes > 0; }

// A flash branch started beside a CPU piece that has not finished yet (the join of a max() waits for it).
bool still_running(const sim::ProcessHandle& io) { return io.state() && !io.done(); }

}  // namespace

int replayed_layer_of(int m, int model_layers, int replayed_layers) {
  return static_cast<int>(static_cast<std::int64_t>(m) * replayed_layers / model_layers);
}

sim::Task<void> decode_step_on_device(devices::Device& device, const DecodeStepWork& step, StepFlashTimes& times) {
  sim::Simulator& sim = device.sim();
  devices::Storage& storage = device.storage();
  const LayerCompute& c = step.compute;
  const sim::Time before = sim::from_seconds(c.before_retrieval_s), cluster = sim::from_seconds(step.cluster_s),
                  beside = sim::from_seconds(c.beside_retrieval_s), after = sim::from_seconds(c.after_retrieval_s);
  const int replayed = static_cast<int>(step.replayed.size());
  for (int m = 0; m < step.model_layers; ++m) {
    const LayerFlashWork& f = step.replayed[static_cast<std::size_t>(replayed_layer_of(m, step.model_layers, replayed))];
    // Pipeline 1: the representatives load beside the attention norm, Q projection and RoPE.
    sim::ProcessHandle io;
    if (f.representatives_bytes > 0)
      io = sim.start(read_representatives(sim, storage, f.representatives_bytes, times.representatives), "reps io");
    co_await device.busy(kDynaKvCpu, before, "norm, Q, RoPE");
    if (still_running(io)) co_await io.done_event();
    // The selection needs the query and the representatives: nothing hides it.
    co_await device.busy(kDynaKvCpu, cluster, "clusters");
    // The retrieval depends on this layer's query: only K/V projections and Q-K scores hide it.
    io = {};
    if (!f.retrieval_runs.empty()) io = sim.start(read_runs_then_copy(sim, storage, f.retrieval_runs, times.retrieval), "retrieval io");
    co_await device.busy(kDynaKvCpu, beside, "K/V proj, Q-K");
    if (still_running(io)) co_await io.done_event();
    // Pipeline 2: the next layer's cached clusters and this layer's writes beside attention and FFN.
    io = {};
    if (has_background(f)) io = sim.start(background_io(sim, storage, f, times.background), "background io");
    co_await device.busy(kDynaKvCpu, after, "softmax, O, FFN");
    if (still_running(io)) co_await io.done_event();
  }
  co_await device.busy(kDynaKvCpu, sim::from_seconds(c.per_token_s), "embed, LM head");
}

}  // namespace mobisim::experiments
