#pragma once
// A compute unit (CPU cluster, mobile GPU, desktop GPU): turns a transformer
// `Work` into time with a per-operator roofline,
//
//   t(op) = max( flops / (peak[dtype] * efficiency(op)),
//                bytes / (mem_bandwidth * bandwidth_efficiency[dtype]) ) + call_overhead * layers,
//
// summed over operators; efficiency(op) is `gemv_compute_efficiency` for
// single-token operators (decode runs different kernels than batched prefill)
// and `compute_efficiency` otherwise, except the attention operators (scores, softmax, weighted
// values), which use `attention_compute_efficiency` when it is set (runtimes such as mllm run them
// on other kernels than the quantised linear layers, e.g. in floating point on the CPU). `peak[dtype]` is the unit's peak for arithmetic on
// weights of that dtype (int4/fp8 fall back to int8, bf16 to fp16, then fp32). An operator that names
// its own dtype (LoRA adapters beside int4 linears) is charged at that dtype's peak, efficiency and
// bandwidth instead of the pass's; a runtime may make a dtype's kernels costlier (`kernel_cost_by_dtype`).
// Energy is active power while busy plus idle power otherwise (see Device).
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "devices/engine_gaps.h"
#include "models/cost_model.h"
#include "sim/params.h"
#include "sim/time.h"

namespace mobisim::devices {

// One CPU cluster (device profile `compute.cpu.clusters`): `count` cores of one kind at `ghz`, each with
// `vector_pipes` 128-bit SIMD pipes that each issue one SDOT or SMMLA per cycle (Arm's software
// optimization guides; docs/cpu_isa_sources.md), unless `issue_per_cycle` gives a path's own rate: a core
// whose scheduling model issues fewer of that path's instructions per cycle than it has pipes (Qualcomm's
// Oryon: SMMLA 2 per cycle on 4 pipes, LLVM's AArch64SchedOryon.td).
struct CpuCluster {
  std::string core;
  int count = 0;
  double ghz = 0;
  int vector_pipes = 0;
  std::map<std::string, double> issue_per_cycle;  // ISA path -> instructions per core per cycle
  // Instructions of `isa_path` one core issues per cycle: issue_per_cycle's value, else vector_pipes.
  double instructions_per_cycle(const std::string& isa_path) const;
};

// Int8 operations (2 per multiply-accumulate) one 128-bit pipe completes per cycle on an ISA path:
// `neon` (SMLAL, 8 MACs) 16, `dotprod` (SDOT, 16 MACs) 32, `i8mm` (SMMLA, a 2x8 by 8x2 block, 32 MACs) 64.
// Any other path (sve, sme, ...) has no peak model: ConfigError naming it.
double int8_ops_per_pipe_cycle(const std::string& isa_path);

// Throughput of `chunks` equal chunks of work (1 unit each) on cores of the given rates (units/s), one thread
// per core, claimed dynamically: thread i starts on chunk i, and whichever thread finishes first takes the
// next unclaimed chunk (ties: the lower thread). Returns chunks / (the time the last chunk ends). With many
// chunks it tends to the sum of the rates; with few, a slow core that claims a late chunk holds the end back.
// ConfigError on no cores, a rate <= 0 or chunks < the number of cores.
double chunked_throughput(const std::vector<double>& core_rates, int chunks);

struct ComputeUnitSpec {
  std::string name;
  std::map<models::DType, double> peak_tflops;  // per weight dtype
  double mem_bandwidth_gbps = 0;
  double compute_efficiency = 1.0;
  double gemv_compute_efficiency = 1.0;  // for single-token (matrix-vector) operators, e.g. decode
  double attention_compute_efficiency = 0;  // for the attention operators at any width (0: as the rest)
  double bandwidth_efficiency = 1.0;
  double call_overhead_us = 0;
  // Set by an engine profile (devices/engine.h): efficiencies for particular weight dtypes (e.g. a
  // runtime's int4 kernels beside its fp16 ones); dtypes not listed use the scalars above.
  std::map<models::DType, double> efficiency_by_dtype, gemv_efficiency_by_dtype;
  // The same for the achieved DRAM bandwidth: a runtime's int4 decode kernels unpack and scale every
  // weight they stream, so they reach less of the bus than its bf16 ones.
  std::map<models::DType, double> bandwidth_efficiency_by_dtype;
  // Set by an engine profile: how many times longer than the unit's own kernels a runtime's kernels
  // for a weight dtype take on the same arithmetic (mllm's Q6_K dot products beside its Q4_K ones); the
  // efficiency for that dtype is divided by it, batched and single-token alike. Absent: 1.
  std::map<models::DType, double> kernel_cost_by_dtype;
  // Set by an engine profile: the achieved fraction of the memory bandwidth of the LM head's weights when
  // they are stored at a dtype listed here (Op::stored_dtype, else the pass's): a runtime whose classifier
  // GEMV runs another kernel on some GPU generation (llama.cpp's OpenCL flat K-quant GEMV on Adreno A7x,
  // devices/engine.h `generations`). Absent: the dtype's bandwidth_efficiency, as every other weight.
  std::map<models::DType, double> lm_head_bandwidth_efficiency_by_dtype;
  // Set by an engine profile: the (phase, dtype) values it neither sets nor inherits; using one is a
  // ConfigError (devices/engine_gaps.h). null: no engine applied, every value is the profile's.
  std::shared_ptr<const EngineGaps> gaps;
  double active_power_w = 0;
  double idle_power_w = 0;
  // Power while one thread runs on the unit alone (a CPU whose `active_power_w` is that of a runtime's
  // thread pool): work a runtime does on its calling thread, such as sampling. Absent: not described;
  // single_thread_power() is then a ConfigError naming the key (the pool's power is no stand-in for it).
  std::optional<double> single_thread_power_w;
  double single_thread_power() const;
  int cores = 1;
  // Streams from memory of its own (a discrete GPU), not over the phone's shared DRAM bus.
  bool dedicated_memory = false;
  // A CPU's clusters and ISA features (`clusters`, `isa`; empty: not described). A runtime whose CPU
  // kernels are given per ISA path (engine `cpu.isa_kernels`) needs them (devices/engine.h).
  std::vector<CpuCluster> clusters;
  std::vector<std::string> isa;  // dotprod, i8mm, bf16, sve, sve2, sme, sme2, ...
  // A GPU's family (adreno, mali, apple, nvidia) and generation within it (a7x, a8x, valhall, ...;
  // empty: not described). A runtime whose GPU kernels are written per family (engine `gpu.families`)
  // needs the family: its efficiencies are those of its kernels on that family (devices/engine.h).
  std::string family, generation;
  bool has_isa(const std::string& feature) const;
  // Peak int8 op/s of `threads` threads (0: every core) on ISA path `isa_path`, one thread per core,
  // fastest cores first (the scheduler puts busy threads on the big cores): the sum over those cores of
  // ghz x instructions_per_cycle(path) x int8_ops_per_pipe_cycle(path). ConfigError without clusters or with
  // more threads than cores.
  double isa_peak_ops(const std::string& isa_path, int threads) const;
  // The int8 op/s those threads reach on a matmul cut into threads x chunks_per_thread equal chunks that
  // the threads claim one at a time (each starts on its own chunk, then takes the next unclaimed one when
  // it finishes, as ggml-cpu's chunk counter hands them out): the matmul's work over the time its last
  // chunk ends (chunked_throughput). chunks_per_thread <= 0: the work is spread in proportion to the cores'
  // peaks (fine-grained chunks), i.e. isa_peak_ops.
  double isa_chunked_peak_ops(const std::string& isa_path, int threads, int chunks_per_thread) const;

  static ParamSchema schema();
  static ComputeUnitSpec from_params(const std::string& name, const Params& p);

  double peak_flops(models::DType t) const;  // FLOP/s, throws ConfigError when none applies
  // Achieved fraction of peak for batched (tokens > 1) or single-token work on weights of `t`
  // (a ConfigError when the engine left that phase and dtype without a value).
  double efficiency(models::DType t, bool single_token) const;
  double kernel_cost(models::DType t) const;
  // Achieved fraction of the memory bandwidth streaming weights of `t`.
  double bandwidth_efficiency_for(models::DType t) const;
  // Roofline time of one operator and of a whole Work.
  double op_seconds(const models::Op& op, models::DType dtype) const;
  double seconds(const models::Work& w, models::DType dtype) const;
  sim::Time time(const models::Work& w, models::DType dtype) const { return sim::from_seconds(seconds(w, dtype)); }
  // Time to stream `bytes` through this unit's memory (e.g. a DRAM-to-DRAM copy).
  double copy_seconds(double bytes) const;

 private:
  double raw_efficiency(models::DType t, bool single_token) const;
  struct Roofline;
};

// A mapping weight dtype -> number > 0 under `key` (peak_tflops, an engine's kernel_cost); absent: empty.
// `what` says what the numbers are, for the error (e.g. "factor, e.g. {int6: 1.875}").
std::map<models::DType, double> parse_positive_per_dtype(const Params& p, const std::string& key, const std::string& what);

}  // namespace mobisim::devices
