#pragma once
// A mobile NPU running static compiled graphs (as Qualcomm QNN / mllm do).
//
// A graph is compiled for a fixed input shape: a chunk of `c` tokens. Running n
// tokens on a graph of chunk c costs ceil(n / c) executions, each padded to c
// tokens. One execution costs
//
//   t_exec(c) = exec_overhead + max( flops(c) / (peak * util(c)), weight_bytes / bandwidth ),
//   util(c)   = max_utilization * c / (c + half_utilization_chunk),
//
// i.e. a weight-stationary array that is poorly used by short inputs and
// saturates for long ones (CoordGen section 2.3: longer chunks are more
// efficient per token). Loading a graph (or switching to another shape) costs
// `graph_load_ms_per_layer` per layer and keeps a copy of the weights resident
// per loaded graph (graphs do not share weights).
//
// Decode (one token per execution) does not use the chunk curve: a single-token graph streams every
// weight from DRAM once per token, so it is bounded by memory bandwidth,
//
//   t_decode = exec_overhead + max( flops / (peak * max_utilization),
//                                   bytes / (mem_bandwidth * decode_bandwidth_efficiency) ).
//
// A chunked prefill runs chunk after chunk, each attending to the K/V of the chunks before it
// (chunked_prefill_seconds). The peak depends on the activation dtype too: integer weights with
// 16-bit activations (W4A16/W8A16, as QNN/Genie run LLMs) reach `mixed_precision_fraction` of the
// INT8 peak. The engine profile (devices/engine.h) sets these three; the defaults (1.0, 1.0, 256)
// leave the earlier behaviour unchanged.
#include <memory>
#include <string>

#include "devices/engine_gaps.h"
#include "models/cost_model.h"
#include "sim/params.h"

namespace mobisim::devices {

struct NpuSpec {
  double peak_tops_int8 = 0;
  double peak_tflops_fp16 = 0;
  double max_utilization = 1.0;
  double half_utilization_chunk = 64;
  double exec_overhead_ms = 0;
  double mem_bandwidth_gbps = 0;
  double graph_load_ms_per_layer = 0;
  double active_power_w = 0;
  double idle_power_w = 0;
  // Runtime properties, set by an engine profile (not device-profile fields).
  double decode_bandwidth_efficiency = 1.0;
  double mixed_precision_fraction = 1.0;
  std::int64_t graph_chunk = 256;
  // Set by an engine profile: the (phase, weight dtype) values it neither sets nor inherits; the
  // timing functions below raise them (devices/engine_gaps.h). null: no engine applied.
  std::shared_ptr<const EngineGaps> gaps;
  void check(Phase phase, models::DType weight) const {
    if (gaps) gaps->check(phase, weight);
  }

  static ParamSchema schema();
  static NpuSpec from_params(const Params& p);

  double utilization(double chunk) const { return max_utilization * chunk / (chunk + half_utilization_chunk); }
  // One execution of a graph of `chunk` tokens doing `work` (the work of exactly `chunk` tokens).
  // `overhead_share` is the part of the model the graph covers: exec_overhead_ms is a cost per
  // pass through the whole model (it is fitted to whole-model decode steps), so a graph of one
  // block of layers out of B carries its share of it, and B block executions cost one pass's.
  double exec_seconds(const models::Work& work_of_chunk, double chunk, models::DType weight_dtype,
                      double overhead_share = 1.0) const;
  // n tokens on a graph of chunk c: ceil(n/c) padded executions (work_of_chunk as above).
  double run_seconds(std::int64_t n_tokens, std::int64_t chunk, const models::Work& work_of_chunk,
                     models::DType weight_dtype) const;
  double graph_load_seconds(int layers) const { return graph_load_ms_per_layer * 1e-3 * layers; }

  // Peak operations per second for weights of `weight` dtype and activations of `activation` dtype.
  double peak_ops(models::DType weight, models::DType activation) const;
  // One decode step (the work of one token): bandwidth-bound weight streaming.
  double decode_seconds(const models::Work& work_of_token, models::DType weight, models::DType activation) const;
  // Prefill of `n_new` tokens after `n_cached` on graphs of `chunk` tokens: each chunk padded to
  // `chunk` and attending to every earlier position (cached ones and earlier chunks).
  double chunked_prefill_seconds(const models::CostModel& cost, std::int64_t n_new, std::int64_t n_cached,
                                 std::int64_t chunk) const;
  // Any work submitted to the NPU as a whole (Device::compute): single-token work as decode_seconds,
  // longer work in graph_chunk-token executions at the chunk's utilisation.
  double work_seconds(const models::Work& work, models::DType weight, models::DType activation) const;
};

}  // namespace mobisim::devices
