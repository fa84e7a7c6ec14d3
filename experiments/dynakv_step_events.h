#pragma once
// A DynaKV decode step as events on one simulated Device (issue 34): the pipeline of seed 003,
// section 6.1 and Figure 9 (quoted in experiments/dynakv_latency.h), layer after layer, with the
// compute as busy time on the phone's CPU and the flash work as requests on its storage. Each
// max() of the closed form is a join: the CPU piece and the flash branch beside it start together
// and the layer goes on when both are done.
//
//   per layer:  [CPU attention norm + Q projection + RoPE  |  storage: the representatives]   join
//               [CPU cluster arithmetic]
//               [CPU K/V projections + Q-K scores  |  storage: the retrieval runs, then the
//                                                     loading thread's copy of their bytes]  join
//               [CPU softmax .. FFN  |  storage: the prefetch runs, then their copy; the
//                                       offload's writes; the pool moves read back]          join
//   per token:  [CPU embedding, final norm, LM head]
//
// At a join the compute threads wait for the loading thread spinning, not sleeping: seed 003,
// section 7, synchronises the two "through atomic semaphores", and the runtime's own waits spin the
// same way (llama.cpp ggml/src/ggml-cpu/ggml-cpu.c at 1b5f9501, ggml_barrier: a waiting thread loops
// on an atomic load with ggml_thread_cpu_relax(), a `yield` on aarch64, never a futex or WFE). So the
// CPU stays busy, at its active power, until the flash branch ends (StepFlashTimes::spin_wait); the
// compute columns are the busy time less that wait.
//
// A flash branch's reads go out together (an io_uring batch, admitted by Storage::admit_reads when
// the branch starts: the step runs as one process, which waits after its CPU piece until the
// branch's end), so the device's queue depth, IOPS and bandwidth time them; the loading thread (seed 003, section 7: one
// dedicated thread) then copies what it read serially, at the storage's load_ns_per_byte, as the
// replay's closed form has it (policies/kvcluster/session_replay.h). The representatives and the
// pool moves are single reads paying that copy themselves (StorageSpec::read_seconds, as before).
// Every branch joins before the next phase starts, so each finds the storage idle and takes what
// the closed form's idle-device times say, to the rounding of the durations to nanoseconds.
//
// The replayed layers stand for the model's: model layer m runs replayed layer
// floor(m x replayed / model_layers), so each of R replayed layers of an N-layer model runs N / R
// times when R divides N (the closed form's scale N / R). Otherwise a layer runs whole or not at
// all: the first N mod R replayed layers run once more than the others (table5's 5 captured layers
// of the 36-layer Qwen2.5-3B: 8, 7, 7, 7, 7), where the closed form weighted each N / R (7.2).
#include <cstdint>
#include <span>
#include <vector>

#include "devices/device.h"
#include "experiments/dynakv_latency.h"
#include "sim/simulator.h"
#include "sim/time.h"

namespace mobisim::experiments {

// One replayed layer's flash work in a decode step.
struct LayerFlashWork {
  double representatives_bytes = 0;              // the layer's cluster representatives (one read)
  std::vector<std::int64_t> retrieval_runs;  // missed clusters and forced split loads, read together
  std::vector<std::int64_t> prefetch_runs;   // the cached clusters, read together
  double write_bytes = 0;                        // the offload's writes (new entries, pool moves)
  double moved_bytes = 0;                        // pool moves read back (one read)
};

// One decode step of the whole model.
struct DecodeStepWork {
  LayerCompute compute;                  // every layer's (the same for each) and the token's
  double cluster_s = 0;                  // cluster arithmetic of one layer
  std::vector<LayerFlashWork> replayed;  // the replayed layers' flash work
  int model_layers = 0;
};

// How long each flash branch took, summed over the step's layers (the summary's I/O columns).
struct StepFlashTimes {
  sim::Time representatives = 0;
  sim::Time retrieval = 0;
  sim::Time background = 0;  // prefetch, writes and moves
  sim::Time spin_wait = 0;   // the compute threads spinning at the joins while a flash branch runs on
};

// What a step keeps per replayed layer from one model layer to the next: its flash branches as the
// storage recorded them (Storage::Repeated; every branch starts on an idle storage, so each model
// layer a replayed layer stands for replays them), and its copies' durations. Kept by the caller from
// step to step so that its buffers are reused; each step resets what it uses.
struct ReplayedLayerRepeats {
  devices::Storage::Repeated representatives, retrieval, prefetch, write, moved;
  sim::Time retrieval_copy = 0, prefetch_copy = 0;  // the loading thread's copy of the runs' bytes
};
using StepRepeats = std::vector<ReplayedLayerRepeats>;

// Runs the step on `device` (its "cpu" unit and its storage) from now; adds the branches' times to `times`.
// `step`, `times` and `repeats` must outlive the returned task. The storage must keep no request
// latencies and have no timeline (Storage::keep_request_latencies(false); the branches are admitted,
// not run as processes).
sim::Task<void> decode_step_on_device(devices::Device& device, const DecodeStepWork& step, StepFlashTimes& times,
                                      StepRepeats& repeats);
// The same with repeats of its own (one step alone).
sim::Task<void> decode_step_on_device(devices::Device& device, const DecodeStepWork& step, StepFlashTimes& times);

// The replayed layer model layer `m` of `model_layers` runs.
int replayed_layer_of(int m, int model_layers, int replayed_layers);

}  // namespace mobisim::experiments
