// CoordGen energy (policies/specdec/specdec_policy.h, Energy): work a runtime does on its calling
// thread (sampling for the in-context calibration, retrieval drafting) is charged one CPU core's
// power, the CPU's other work the power of the runtime's worker pool. Hand-computed joules for a
// tiny request, on the policy's own estimate and on the device replay.
#include <gtest/gtest.h>

#include <string>

#include "devices/device.h"
#include "experiments/simulation.h"
#include "policies/specdec/sd_policies.h"
#include "sim/error.h"
#include "sim/registry.h"
#include "test_specdec_util.h"
#include "test_util.h"

namespace mobisim::policies::specdec {
namespace {

// Every NPU execution costs ~1 s (overhead); the CPU's work is ~free apart from the fixed-time
// phases (sampling, drafting). CPU pool 4 W, one thread 1.5 W, idle 0.5 W; NPU 2 W / 0.1 W; base 0.25 W.
// `single_thread_w`: one thread's power (4 W: a profile whose one thread draws the whole pool's power).
SpecDecEnv energy_env(double single_thread_w) {
  devices::NpuSpec n = mobisim::testing::one_second_per_execution_npu();
  n.idle_power_w = 0.1;
  devices::ComputeUnitSpec c;
  c.peak_tflops[models::DType::kF32] = c.peak_tflops[models::DType::kF16] = 1000;
  c.mem_bandwidth_gbps = 1000;
  c.active_power_w = 4;
  c.idle_power_w = 0.5;
  c.single_thread_power_w = single_thread_w;
  const models::ModelSpec m = mobisim::testing::tiny_transformer_spec();
  return SpecDecEnv{n, c, 0.25, models::CostModel(m), models::CostModel(m)};
}

devices::DeviceProfile device_of(const SpecDecEnv& env) {
  devices::DeviceProfile d;
  d.name = "toy";
  d.base_power_w = env.base_power_w;
  d.compute["cpu"] = env.cpu;
  d.npu = env.npu;
  d.dram = devices::DramSpec{8, 1e6, 0};  // a bus so wide that it never slows a unit
  return d;
}

DecodeTrace steps_of(int steps, int draft, int accepted) {
  DecodeTrace t;
  t.steps.assign(steps, DecodeStep{draft, accepted});
  return t;
}

RequestBreakdown run_policy(const std::string& yaml, const SpecDecEnv& env, std::int64_t prompt, const DecodeTrace& t) {
  return Registry<SpecDecPolicy>::instance().create(load_yaml_string(yaml, "test"), ConfigSource{})->run(env, prompt, t);
}

ReplayResult replay_energy(const SpecDecEnv& env, const std::vector<Phase>& phases) {
  sim::StatGroup stats("toy");
  ReplayResult out;
  experiments::SimulatedRun run(device_of(env), stats);
  run.start(replay_phases(run.device(), phases, out), "request");
  run.run();
  return out;
}

TEST(SpecdecEnergy, BusyDrawingChargesItsOwnPowerForItsTime) {
  const SpecDecEnv env = energy_env(1.5);
  sim::StatGroup stats("toy");
  experiments::SimulatedRun run(device_of(env), stats);
  auto work = [](devices::Device& d) -> sim::Task<void> {
    co_await d.busy("cpu", sim::from_seconds(2), "pool");
    co_await d.busy_drawing("cpu", sim::from_seconds(1), 1.5, "one thread");
  };
  run.start(work(run.device()), "work");
  run.run();
  // 3 s: base 0.25 x 3; CPU 4 W x 2 s + 1.5 W x 1 s; NPU idle 0.1 W x 3 s.
  EXPECT_NEAR(run.device().energy_j(), 0.75 + 8.0 + 1.5 + 0.3, 1e-9);
  EXPECT_NEAR(run.device().busy_seconds("cpu"), 3.0, 1e-12);
}

TEST(SpecdecEnergy, BusyDrawingRefusesANegativePower) {
  const SpecDecEnv env = energy_env(1.5);
  sim::StatGroup stats("toy");
  experiments::SimulatedRun run(device_of(env), stats);
  auto work = [](devices::Device& d) -> sim::Task<void> {
    co_await d.busy_drawing("cpu", sim::from_seconds(1), -1.0, "bad");
  };
  run.start(work(run.device()), "work");
  // The simulator reports the failed process, naming the phase and what was expected.
  try {
    run.run();
    ADD_FAILURE() << "a negative power was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'bad' on cpu draws -1 W (expected >= 0)"), std::string::npos) << e.what();
  }
}

// CoordGen, sequential calibration, on the overhead-bound NPU: a 256-token prompt (2 blocks of 2
// layers: prefill 1 s, synchronous switch 2 s on the NPU), sampling 2 ms/token = 0.512 s and two
// 1 ms retrieval drafts on one CPU thread, two 1 s verifications on the NPU (attention ~0 s).
TEST(SpecdecEnergy, TinyCoordgenRequestByHand) {
  const std::string yaml =
      "{impl: coordgen, calibration_overlap: sequential, prefill_chunk: 256, decode_chunk: 32, blocks: 2, "
      "switch: synchronous}";
  const SpecDecEnv env = energy_env(1.5);
  const RequestBreakdown r = run_policy(yaml, env, 256, steps_of(2, 31, 4));
  const double sampling_s = 0.512, draft_s = 2 * 0.001;
  EXPECT_NEAR(r.calibration_cpu_s, sampling_s, 1e-12);
  EXPECT_NEAR(r.draft_s, draft_s, 1e-12);
  EXPECT_NEAR(r.cpu_single_thread_s, sampling_s + draft_s, 1e-12);
  const double total = r.total_s();
  EXPECT_NEAR(total, 1.0 + 2.0 + sampling_s + draft_s + 2.0, 2e-2);
  // The calling thread polls through the prefill's and the verifications' NPU executions, not
  // through the graph switch (a load, not an execution): 1 + 2 s.
  EXPECT_NEAR(r.npu_polled_s, r.npu_busy_s - r.switch_s, 1e-12);
  EXPECT_NEAR(r.npu_polled_s, 3.0, 2e-2);
  // By hand from the busy times: NPU 2 W busy, 0.1 W idle; CPU 1.5 W for its single-thread work,
  // 4 W for the rest (the prefill's and verifications' attention), 0.5 W idle; the polling core
  // 1.5 - 0.5 W over the idle CPU while the NPU executes; base 0.25 W.
  const double st = sampling_s + draft_s, pool = r.cpu_busy_s - st;
  const double by_hand = 2.0 * r.npu_busy_s + 0.1 * (total - r.npu_busy_s) + 1.5 * st + 4.0 * pool +
                         0.5 * (total - r.cpu_busy_s) + 1.0 * r.npu_polled_s + 0.25 * total;
  EXPECT_NEAR(r.energy_j, by_hand, 1e-9);
  // The single-thread phases carry one core's power, the polled NPU executions the NPU's and the
  // polling core's; nothing else carries a power of its own.
  for (const Phase& ph : r.phases) {
    const bool single = ph.label == "calibration" || ph.label == "draft";
    const bool polled = ph.unit == "npu" && ph.label != "graph switch";
    EXPECT_EQ(ph.power_w.has_value(), single || polled) << ph.label;
    if (single) {
      EXPECT_DOUBLE_EQ(*ph.power_w, 1.5) << ph.label;
    }
    if (polled) {
      EXPECT_DOUBLE_EQ(*ph.power_w, 2.0 + 1.0) << ph.label;
    }
  }
  // The device replay charges the same joules.
  const ReplayResult out = replay_energy(env, r.phases);
  EXPECT_NEAR(out.latency_s, total, 2e-9);  // each phase rounded to the clock's nanosecond
  EXPECT_NEAR(out.energy_j, r.energy_j, 1e-6);
  // With one thread drawing the pool's 4 W the same work costs: (4 - 1.5) x 0.514 J more,
  // and the polling core too (4 - 0.5 instead of 1.5 - 0.5 W over 3 s), on the estimate and on the device.
  const SpecDecEnv pool_only = energy_env(4.0);
  const RequestBreakdown p = run_policy(yaml, pool_only, 256, steps_of(2, 31, 4));
  const double more = 2.5 * (sampling_s + draft_s) + 2.5 * r.npu_polled_s;
  EXPECT_NEAR(p.energy_j - r.energy_j, more, 1e-9);
  EXPECT_NEAR(replay_energy(pool_only, p.phases).energy_j - out.energy_j, more, 1e-6);
}

// NPU vanilla, 10 one-token steps of 1 s each on the NPU: with mllm's RPC polling the calling
// thread spins through the prefill (1 s) and the 10 steps: (1.5 - 0.5) W x 11 s = 11 J more than
// without; the graph switch (2 s) is not polled; the latency is the same.
TEST(SpecdecEnergy, RpcPollingChargesOneCoreThroughNpuExecutions) {
  const std::string shape = "prefill_chunk: 256, decode_chunk: 32, blocks: 2, switch: synchronous";
  const SpecDecEnv env = energy_env(1.5);
  const RequestBreakdown on = run_policy("{impl: npu_vanilla, " + shape + "}", env, 256, steps_of(10, 0, 0));
  const RequestBreakdown off =
      run_policy("{impl: npu_vanilla, npu_rpc_polling: false, " + shape + "}", env, 256, steps_of(10, 0, 0));
  EXPECT_NEAR(on.npu_polled_s, 11.0, 2e-2);
  EXPECT_DOUBLE_EQ(off.npu_polled_s, 0.0);
  EXPECT_NEAR(on.npu_polled_s, on.npu_busy_s - on.switch_s, 1e-12);
  EXPECT_DOUBLE_EQ(on.total_s(), off.total_s());
  EXPECT_NEAR(on.energy_j - off.energy_j, 1.0 * on.npu_polled_s, 1e-9);
  const ReplayResult a = replay_energy(env, on.phases), b = replay_energy(env, off.phases);
  EXPECT_NEAR(a.latency_s, b.latency_s, 1e-12);
  EXPECT_NEAR(a.energy_j - b.energy_j, 1.0 * on.npu_polled_s, 1e-6);
  EXPECT_NEAR(a.energy_j, on.energy_j, 1e-6);
  // CPU decoding has no NPU executions after the prefill: only its 1 s is polled.
  EXPECT_NEAR(run_policy("{impl: cpu_vanilla, " + shape + "}", env, 256, steps_of(10, 0, 0)).npu_polled_s, 1.0, 1e-2);
}

// Pipelined calibration: the sampling slices run in the background stream, each at one thread's power.
TEST(SpecdecEnergy, PipelinedSamplingIsChargedOneThread) {
  const std::string shape = "prefill_chunk: 256, decode_chunk: 32, blocks: 2, switch: synchronous";
  const SpecDecEnv env = energy_env(1.5), pool_only = energy_env(4.0);
  const RequestBreakdown r = run_policy("{impl: coordgen, " + shape + "}", env, 512, steps_of(2, 31, 4));
  const RequestBreakdown p = run_policy("{impl: coordgen, " + shape + "}", pool_only, 512, steps_of(2, 31, 4));
  int background = 0;
  for (const Phase& ph : r.phases)
    if (ph.background) {
      ++background;
      ASSERT_TRUE(ph.power_w.has_value());
      EXPECT_DOUBLE_EQ(*ph.power_w, 1.5);
    }
  EXPECT_EQ(background, 512);  // one slice per prompt token (calibration_slice_tokens 1)
  // 1.024 s of sampling, 2 ms of drafting and the polled NPU time, 2.5 W cheaper each second; same timeline.
  const ReplayResult a = replay_energy(env, r.phases), b = replay_energy(pool_only, p.phases);
  EXPECT_NEAR(a.latency_s, b.latency_s, 1e-12);
  EXPECT_NEAR(b.energy_j - a.energy_j, 2.5 * (1.024 + 0.002 + r.npu_polled_s), 1e-6);
}

TEST(SpecdecEnergy, RequestEnergyRefusesMoreSingleThreadTimeThanBusyTime) {
  const SpecDecEnv env = energy_env(1.5);
  // 1 s: NPU idle 0.1, CPU 0.5 s at 1.5 W + 0.5 s idle at 0.5 W, base 0.25.
  EXPECT_NEAR(request_energy_j(env, 1.0, 0.0, 0.5, 0.5), 0.1 + 0.75 + 0.25 + 0.25, 1e-12);
  EXPECT_THROW(request_energy_j(env, 1.0, 0.0, 0.5, 0.6), InputError);
}

TEST(SpecdecEnergy, CoordgenPhonesDescribeOneThreadsPower) {
  // The profiles' measured single big-core powers (configs/devices/*.yaml, with their sources).
  EXPECT_DOUBLE_EQ(devices::load_device_profile("oneplus-13").unit("cpu", "test").single_thread_power(), 6.27);
  EXPECT_DOUBLE_EQ(devices::load_device_profile("redmi-k70-pro").unit("cpu", "test").single_thread_power(), 6.27);
  EXPECT_DOUBLE_EQ(devices::load_device_profile("redmi-k60-pro").unit("cpu", "test").single_thread_power(), 4.9);
  // A profile that does not describe it: asking for it is a ConfigError naming the key (no stand-in).
  const devices::ComputeUnitSpec pixel = devices::load_device_profile("pixel7").unit("cpu", "test");
  EXPECT_FALSE(pixel.single_thread_power_w.has_value());
  try {
    (void)pixel.single_thread_power();
    ADD_FAILURE() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("single_thread_power_w"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mobisim::policies::specdec
