// Storage's analytic command path against the per-command event model: random request mixes
// (concurrent reads and writes, bursts started at the same instant, requests arriving while
// others are queued) must give the same completion time for every request, to the nanosecond,
// and the same busy time, command count and energy.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "devices/storage.h"
#include "sim/error.h"
#include "sim/event.h"

namespace mobisim::devices {
namespace {

struct Request {
  sim::Time start = 0;
  double bytes = 0;
  bool write = false;
};

struct Outcome {
  std::vector<sim::Time> done;
  double busy_s = 0, energy_j = 0, commands = 0, bytes_read = 0, flash_written = 0;
  std::vector<double> latency_ms;
};

sim::Task<void> issue(sim::Simulator& sim, Storage& st, Request r, sim::Time& done) {
  if (r.start > sim.now()) co_await sim.timeout(r.start - sim.now());
  if (r.write)
    co_await st.write(r.bytes);
  else
    co_await st.read(r.bytes);
  done = sim.now();
}

Outcome replay(const StorageSpec& spec, const std::vector<Request>& reqs, StorageCommandModel model) {
  sim::Simulator sim;
  sim::StatGroup stats("dev");
  Storage st(sim, spec, "ufs", stats);
  st.set_command_model(model);
  Outcome o;
  o.done.assign(reqs.size(), -1);
  for (std::size_t i = 0; i < reqs.size(); ++i) sim.start(issue(sim, st, reqs[i], o.done[i]));
  sim.run();
  o.busy_s = st.busy_seconds();
  o.energy_j = st.io_energy_j();
  o.bytes_read = st.bytes_read();
  o.flash_written = st.flash_bytes_written();
  for (const auto& [name, v] : stats.flatten())
    if (name.ends_with("commands")) o.commands = v;
  return o;
}

StorageSpec random_spec(std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(0, 1);
  StorageSpec s;
  s.kind = "ufs4.0";
  s.seq_read_gbps = 0.5 + 4 * u(rng);
  s.seq_write_gbps = 0.3 + 2 * u(rng);
  s.random_read_iops = 20000 + 200000 * u(rng);
  s.random_write_iops = 10000 + 150000 * u(rng);
  s.queue_depth = 1 + static_cast<int>(u(rng) * 40);
  s.access_latency_us = 200 * u(rng);
  s.max_transfer_kb = u(rng) < 0.5 ? 4 + 60 * u(rng) : 512;
  s.page_size_kb = u(rng) < 0.5 ? 4 : 16;
  s.read_energy_nj_per_byte = 0.1;
  s.write_energy_nj_per_byte = 0.3;
  s.active_power_w = 0.5;
  return s;
}

std::vector<Request> random_mix(std::mt19937_64& rng, const StorageSpec& spec) {
  std::uniform_real_distribution<double> u(0, 1);
  const int n = 1 + static_cast<int>(u(rng) * 40);
  // The horizon is about as long as the requests take, so many of them contend.
  const double mean_s = spec.read_seconds(2e6);
  std::vector<Request> reqs;
  sim::Time t = 0;
  for (int i = 0; i < n; ++i) {
    if (u(rng) < 0.6) t += sim::from_seconds(u(rng) * mean_s);  // else: same instant as the previous one
    Request r;
    r.start = t;
    r.write = u(rng) < 0.3;
    r.bytes = u(rng) < 0.5 ? std::floor(1 + u(rng) * 64 * 1024) : std::floor(u(rng) * 8e6) + 1;
    reqs.push_back(r);
  }
  return reqs;
}

TEST(StorageFastPath, MatchesThePerCommandModelOnRandomMixesToTheNanosecond) {
  std::mt19937_64 rng(12);
  int contended = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const StorageSpec spec = random_spec(rng);
    const auto reqs = random_mix(rng, spec);
    const Outcome fast = replay(spec, reqs, StorageCommandModel::kAnalytic);
    const Outcome slow = replay(spec, reqs, StorageCommandModel::kPerCommand);
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      ASSERT_EQ(fast.done[i], slow.done[i]) << "trial " << trial << " request " << i << " of " << reqs.size();
      ASSERT_GE(fast.done[i], reqs[i].start);
    }
    EXPECT_EQ(fast.busy_s, slow.busy_s) << "trial " << trial;
    EXPECT_EQ(fast.energy_j, slow.energy_j) << "trial " << trial;
    EXPECT_EQ(fast.commands, slow.commands) << "trial " << trial;
    EXPECT_EQ(fast.bytes_read, slow.bytes_read);
    EXPECT_EQ(fast.flash_written, slow.flash_written);
    // Contention happened: some request finished later than it would alone.
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      const double alone = reqs[i].write ? spec.write_seconds(reqs[i].bytes) : spec.read_seconds(reqs[i].bytes);
      if (sim::to_seconds(slow.done[i] - reqs[i].start) > alone * 1.01 + 1e-6) {
        ++contended;
        break;
      }
    }
  }
  EXPECT_GT(contended, 100);  // the mixes do exercise the queues
}

sim::Task<void> probe_busy(sim::Simulator& sim, Storage& st, sim::Time at, double& busy) {
  co_await sim.timeout(at);
  busy = st.busy_seconds();
}

TEST(StorageFastPath, BusyTimeMidRequestCountsTransfersUnderWay) {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 50; ++trial) {
    const StorageSpec spec = random_spec(rng);
    const double bytes = 3e6;
    const sim::Time probe = sim::from_seconds(spec.read_seconds(bytes) * std::uniform_real_distribution<double>(0, 1)(rng));
    double busy[2] = {0, 0};
    int k = 0;
    for (auto model : {StorageCommandModel::kAnalytic, StorageCommandModel::kPerCommand}) {
      sim::Simulator sim;
      sim::StatGroup stats("dev");
      Storage st(sim, spec, "ufs", stats);
      st.set_command_model(model);
      sim::Time done = 0;
      sim.start(issue(sim, st, Request{0, bytes, false}, done));
      sim.start(probe_busy(sim, st, probe, busy[k++]));
      sim.run();
    }
    EXPECT_EQ(busy[0], busy[1]) << "trial " << trial;
  }
}

// A chain of flash branches one after another, as DynaKV's decode steps issue them: batches of runs
// whose load the caller pays, single reads paying their own, writes.
struct Branch {
  std::vector<std::int64_t> runs;  // a batch when not empty
  double read_bytes = 0, write_bytes = 0;
};

struct ChainOutcome {
  std::vector<sim::Time> ends;
  double busy_s = 0, energy_j = 0, commands = 0, bytes_read = 0, bytes_written = 0;
};

sim::Task<void> issue_chain(sim::Simulator& sim, Storage& st, const std::vector<Branch>& chain, std::vector<sim::Time>& ends) {
  for (const Branch& b : chain) {
    if (!b.runs.empty()) {
      std::vector<double> bytes(b.runs.begin(), b.runs.end());
      co_await st.read_batch(std::move(bytes), "runs", Storage::Load::kByCaller);
    } else if (b.read_bytes > 0) {
      std::vector<double> bytes(1, b.read_bytes);
      co_await st.read_batch(std::move(bytes), "read");
    } else {
      co_await st.write(b.write_bytes);
    }
    ends.push_back(sim.now());
  }
}

sim::Task<void> wait_until(sim::Simulator& sim, sim::Time t) { co_await sim.timeout(t - sim.now()); }

ChainOutcome chain_outcome(sim::Simulator& sim, Storage& st, sim::StatGroup& stats) {
  ChainOutcome o;
  o.busy_s = st.busy_seconds();
  o.energy_j = st.io_energy_j();
  o.bytes_read = st.bytes_read();
  o.bytes_written = st.flash_bytes_written();
  for (const auto& [name, v] : stats.flatten())
    if (name.ends_with("commands")) o.commands = v;
  (void)sim;
  return o;
}

TEST(StorageFastPath, AdmissionGivesWhatTheProcessesGiveToTheNanosecond) {
  std::mt19937_64 rng(34);
  for (int trial = 0; trial < 40; ++trial) {
    StorageSpec spec = random_spec(rng);
    spec.load_ns_per_byte = trial % 2 ? 0.0 : 0.05 + 0.2 * std::uniform_real_distribution<double>(0, 1)(rng);
    std::vector<Branch> chain;
    std::uniform_int_distribution<int> kind(0, 2), count(1, 40);
    std::uniform_int_distribution<std::int64_t> size(1, 3 << 20);
    for (int i = 0; i < 30; ++i) {
      Branch b;
      const int k = kind(rng);
      if (k == 0)
        for (int r = count(rng); r > 0; --r) b.runs.push_back(size(rng));
      else if (k == 1)
        b.read_bytes = static_cast<double>(size(rng));
      else
        b.write_bytes = static_cast<double>(size(rng));
      chain.push_back(std::move(b));
    }
    // The processes.
    sim::Simulator sim_p;
    sim::StatGroup stats_p("dev");
    Storage st_p(sim_p, spec, "ufs", stats_p);
    st_p.keep_request_latencies(false);
    std::vector<sim::Time> ends_p;
    sim_p.start(issue_chain(sim_p, st_p, chain, ends_p));
    sim_p.run();
    const ChainOutcome p = chain_outcome(sim_p, st_p, stats_p);
    // The admissions, each branch at the previous one's end, then the clock run to the last.
    sim::Simulator sim_a;
    sim::StatGroup stats_a("dev");
    Storage st_a(sim_a, spec, "ufs", stats_a);
    st_a.keep_request_latencies(false);
    std::vector<sim::Time> ends_a;
    sim::Time t = 0;
    for (const Branch& b : chain) {
      if (!b.runs.empty())
        t = st_a.admit_reads(t, b.runs, Storage::Load::kByCaller);
      else if (b.read_bytes > 0)
        t = st_a.admit_read(t, b.read_bytes);
      else
        t = st_a.admit_write(t, b.write_bytes);
      ends_a.push_back(t);
    }
    sim_a.start(wait_until(sim_a, t));
    sim_a.run();
    const ChainOutcome a = chain_outcome(sim_a, st_a, stats_a);
    ASSERT_EQ(ends_a, ends_p) << "trial " << trial;
    EXPECT_EQ(sim_a.now(), sim_p.now());
    EXPECT_EQ(a.busy_s, p.busy_s);
    EXPECT_EQ(a.energy_j, p.energy_j);
    EXPECT_EQ(a.commands, p.commands);
    EXPECT_EQ(a.bytes_read, p.bytes_read);
    EXPECT_EQ(a.bytes_written, p.bytes_written);
    EXPECT_GT(a.commands, 0);
  }
}

TEST(StorageFastPath, AdmissionRefusesWhatNeedsAProcessAndThePast) {
  sim::Simulator sim;
  sim::StatGroup stats("dev");
  std::mt19937_64 rng(7);
  Storage st(sim, random_spec(rng), "ufs", stats);
  EXPECT_THROW(st.admit_read(0, 4096), Error);  // latencies kept (the default)
  st.keep_request_latencies(false);
  st.set_command_model(StorageCommandModel::kPerCommand);
  EXPECT_THROW(st.admit_write(0, 4096), Error);
  st.set_command_model(StorageCommandModel::kAnalytic);
  sim.start(wait_until(sim, 1000));
  sim.run();
  EXPECT_THROW(st.admit_read(999, 4096), Error);
  EXPECT_GT(st.admit_read(1000, 4096), 1000);
}


// ---------------------------------------------------------------------------
// Storage::Repeated: the same requests admitted again, each time to an idle storage, replay what
// their first admission recorded (DynaKV's decode step: a replayed layer's branches once per model
// layer). Against admitting them one by one every time: the same completions, and at any instant
// (mid-burst included) the same busy time; at the end the same counters and energy.
// ---------------------------------------------------------------------------
sim::Task<void> probe_busy_at(sim::Simulator& sim, Storage& st, std::vector<sim::Time> at, std::vector<double>& busy) {
  for (sim::Time t : at) {
    if (t > sim.now()) co_await sim.timeout(t - sim.now());
    busy.push_back(st.busy_seconds());
  }
}

struct RepeatPlan {
  Branch branch;
  int times = 1;
  bool overlap = false;  // the first repeat arrives with the previous one (the storage is busy): no replay
};

struct RepeatOutcome {
  std::vector<sim::Time> ends;
  std::vector<double> busy;
  ChainOutcome end;
};

RepeatOutcome admit_repeats(const StorageSpec& spec, const std::vector<RepeatPlan>& plan, const std::vector<sim::Time>& gaps,
                            const std::vector<sim::Time>& probes, bool repeated) {
  sim::Simulator sim;
  sim::StatGroup stats("dev");
  Storage st(sim, spec, "ufs", stats);
  st.keep_request_latencies(false);
  RepeatOutcome o;
  Storage::Repeated same;
  sim::Time t = 0, last_start = 0;
  std::size_t g = 0;
  for (const RepeatPlan& p : plan) {
    same.reset();
    for (int k = 0; k < p.times; ++k) {
      const sim::Time at = p.overlap && k == 0 ? last_start : t + gaps[g++ % gaps.size()];
      const Branch& b = p.branch;
      if (!b.runs.empty())
        t = repeated ? st.admit_reads(at, b.runs, Storage::Load::kByCaller, same) : st.admit_reads(at, b.runs, Storage::Load::kByCaller);
      else if (b.read_bytes > 0)
        t = repeated ? st.admit_read(at, b.read_bytes, Storage::Load::kPerRequest, same) : st.admit_read(at, b.read_bytes);
      else
        t = repeated ? st.admit_write(at, b.write_bytes, same) : st.admit_write(at, b.write_bytes);
      t = std::max(t, at);
      last_start = at;
      o.ends.push_back(t);
    }
  }
  std::vector<sim::Time> probe_at = probes;
  probe_at.push_back(t);
  sim.start(probe_busy_at(sim, st, probe_at, o.busy));
  sim.run();
  o.end = chain_outcome(sim, st, stats);
  return o;
}

TEST(StorageFastPath, RepeatedAdmissionsReplayWhatTheyRecorded) {
  std::mt19937_64 rng(341);
  std::uniform_int_distribution<int> kind(0, 2), count(1, 50), times(1, 6);
  std::uniform_int_distribution<std::int64_t> size(1, 2 << 20), pages(1, 24);
  std::uniform_int_distribution<sim::Time> gap(0, 300'000);
  std::bernoulli_distribution paged(0.7), overlap(0.2);
  for (int trial = 0; trial < 40; ++trial) {
    StorageSpec spec = random_spec(rng);
    spec.load_ns_per_byte = trial % 2 ? 0.0 : 0.3;
    spec.read_command_overhead_us = trial % 3 ? 77.0 : 0.0;
    std::vector<RepeatPlan> plan;
    for (int i = 0; i < 12; ++i) {
      RepeatPlan p;
      const int k = kind(rng);
      if (k == 0)
        for (int r = count(rng); r > 0; --r) p.branch.runs.push_back(paged(rng) ? 4096 * pages(rng) : size(rng));
      else if (k == 1)
        p.branch.read_bytes = static_cast<double>(size(rng));
      else
        p.branch.write_bytes = static_cast<double>(size(rng));
      p.times = times(rng);
      p.overlap = i > 0 && overlap(rng);
      plan.push_back(std::move(p));
    }
    std::vector<sim::Time> gaps = {0};
    for (int i = 0; i < 7; ++i) gaps.push_back(gap(rng));
    // Probes all along the chain: most fall inside some burst.
    const RepeatOutcome plain_once = admit_repeats(spec, plan, gaps, {}, false);
    std::uniform_int_distribution<sim::Time> when(0, plain_once.ends.back());
    std::vector<sim::Time> probes(200);
    for (auto& p : probes) p = when(rng);
    std::sort(probes.begin(), probes.end());
    const RepeatOutcome plain = admit_repeats(spec, plan, gaps, probes, false);
    const RepeatOutcome repeated = admit_repeats(spec, plan, gaps, probes, true);
    ASSERT_EQ(repeated.ends, plain.ends) << "trial " << trial;
    EXPECT_EQ(repeated.busy, plain.busy) << "trial " << trial;
    EXPECT_EQ(repeated.end.busy_s, plain.end.busy_s);
    EXPECT_EQ(repeated.end.energy_j, plain.end.energy_j);
    EXPECT_EQ(repeated.end.commands, plain.end.commands);
    EXPECT_EQ(repeated.end.bytes_read, plain.end.bytes_read);
    EXPECT_EQ(repeated.end.bytes_written, plain.end.bytes_written);
    EXPECT_GT(plain.end.busy_s, 0);
  }
}

// The busy time partway through a replayed burst, by hand: one read of three commands on a storage
// whose controller is slower than its bus, so the transfers have gaps between them.
TEST(StorageFastPath, ReplayedBurstCountsOnlyTransfersDoneByThen) {
  StorageSpec spec;
  spec.kind = "ufs4.0";
  spec.seq_read_gbps = 1;    // 4096 bytes: 4096 ns on the bus
  spec.seq_write_gbps = 1;
  spec.random_read_iops = 1e5;  // 10 us per command on the controller
  spec.random_write_iops = 1e5;
  spec.queue_depth = 8;
  spec.access_latency_us = 0;
  spec.max_transfer_kb = 4;
  sim::Simulator sim;
  sim::StatGroup stats("dev");
  Storage st(sim, spec, "ufs", stats);
  st.keep_request_latencies(false);
  Storage::Repeated same;
  // Transfers [10, 14.096), [20, 24.096), [30, 34.096) us after the arrival.
  EXPECT_EQ(st.admit_read(0, 3 * 4096.0, Storage::Load::kPerRequest, same), 34'096);
  EXPECT_EQ(st.admit_read(100'000, 3 * 4096.0, Storage::Load::kPerRequest, same), 134'096);  // replayed
  std::vector<double> busy;
  sim.start(probe_busy_at(sim, st, {50'000, 112'000, 121'000, 200'000}, busy));
  sim.run();
  auto ns = [](double n) { return n * 1e-9; };  // as Storage::busy_seconds converts
  EXPECT_EQ(busy, (std::vector<double>{ns(3 * 4096), ns(3 * 4096 + 2000), ns(4 * 4096 + 1000), ns(6 * 4096)}));
}

}  // namespace
}  // namespace mobisim::devices
