// Sweeps over MPI (Open MPI through Boost.MPI), compiled when MOBISIM_MPI is on.
//
// Rank 0 coordinates: it sends one run at a time to each idle worker (the run's result path and
// its -p overrides), receives its status, reads the run's summary from the file the worker wrote
// and updates the index. Workers run each run in-process, exactly as `mobisim run` would. With a
// single rank, rank 0 runs everything itself. Results do not depend on the number of ranks: every
// run is an independent simulation, and the index lists runs in sweep order.
#include <fmt/format.h>

#include "sim/strings.h"

#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "experiments/experiment.h"
#include "experiments/sweep.h"
#include "sim/atomic_file.h"
#include "sim/error.h"
#include "sim/params.h"

#ifdef MOBISIM_MPI
#include <boost/mpi/communicator.hpp>
#include <boost/mpi/environment.hpp>
#include <boost/serialization/string.hpp>
#endif

namespace mobisim::experiments::sweep {

namespace fs = std::filesystem;

bool launched_by_mpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_SIZE") != nullptr;
}

MpiRole::MpiRole(bool use_mpi) : use_mpi_(use_mpi) {
  if (!use_mpi_) return;
  session_ = mpi_session();
  worker_ = mpi_rank() != 0;
}

MpiRole::~MpiRole() {
  if (use_mpi_ && !worker_) mpi_stop_workers();
}

void run_in_process(const std::string& base, Run& run, int threads, WorkloadCache* workloads) {
  create_dirs(fs::path(run.result).parent_path().string());
  RunOptions o;
  o.overrides = run.overrides;
  o.output_override = run.result;
  o.quiet = true;
  o.no_plot = true;
  o.threads = threads;
  o.workloads = workloads;
  try {
    const int rc = run_experiment_file(base, o);
    run.status = rc == kExitOk ? "ok" : "failed";
    if (rc != kExitOk) run.error = fmt::format("exit {}", rc);
  } catch (const std::exception& e) {
    run.status = "failed";
    run.error = e.what();
  }
}

#ifdef MOBISIM_MPI

namespace {

namespace mpi = boost::mpi;
constexpr int kTagWork = 1, kTagResult = 2;
constexpr char kField = '\x1e', kItem = '\x1f';

std::string encode_work(const std::string& base, const Run& r) {
  std::string overrides;
  for (std::size_t i = 0; i < r.overrides.size(); ++i) {
    if (i) overrides.push_back(kItem);
    overrides.append(r.overrides[i]);
  }
  return fmt::format("{}{}{}{}{}{}{}", r.index, kField, base, kField, r.result, kField, overrides);
}

}  // namespace

bool mpi_available() { return true; }

std::shared_ptr<void> mpi_session() { return std::make_shared<mpi::environment>(mpi::threading::single, false); }

int mpi_rank() { return mpi::communicator().rank(); }
int mpi_size() { return mpi::communicator().size(); }

void execute_mpi(const std::string& base, std::vector<Run>& runs, const std::function<void(Run&)>& done) {
  mpi::communicator world;
  std::vector<std::size_t> todo;
  for (const auto& r : runs)
    if (r.status != "ok" && r.status != "skipped") todo.push_back(r.index);
  std::size_t next = 0;
  auto finish = [&](Run& r) {
    if (r.status == "ok") {
      try {
        r.summary = read_summary(r.result);
      } catch (const Error& e) {
        r.status = "failed";
        r.error = e.what();
      }
    }
    done(r);
  };
  // Runs are looked up by their index in this batch (search sweeps execute batches).
  std::map<std::size_t, std::size_t> position;
  for (std::size_t i = 0; i < runs.size(); ++i) position[runs[i].index] = i;
  if (world.size() == 1) {  // nobody to hand out to
    for (std::size_t index : todo) {
      Run& r = runs[position.at(index)];
      run_in_process(base, r);
      finish(r);
    }
    return;
  }
  int busy = 0;
  for (int w = 1; w < world.size() && next < todo.size(); ++w, ++busy)
    world.send(w, kTagWork, encode_work(base, runs[position[todo[next++]]]));
  while (busy > 0) {
    std::string reply;
    const mpi::status st = world.recv(mpi::any_source, kTagResult, reply);
    --busy;
    const auto f = split(reply, kField);
    Run& r = runs[position.at(std::stoul(f.at(0)))];
    r.status = f.at(1);
    r.error = f.at(2);
    finish(r);
    if (next < todo.size()) {
      world.send(st.source(), kTagWork, encode_work(base, runs[position[todo[next++]]]));
      ++busy;
    }
  }
}

void mpi_worker_loop() {
  mpi::communicator world;
  for (;;) {
    std::string work;
    world.recv(0, kTagWork, work);
    if (work.empty()) return;  // stop
    const auto f = split(work, kField);
    Run r;
    r.index = std::stoul(f.at(0));
    r.result = f.at(2);
    if (!f.at(3).empty()) r.overrides = split(f.at(3), kItem);
    run_in_process(f.at(1), r);
    world.send(0, kTagResult, fmt::format("{}{}{}{}{}", r.index, kField, r.status, kField, r.error));
  }
}

void mpi_stop_workers() {
  mpi::communicator world;
  if (world.rank() != 0) return;
  for (int w = 1; w < world.size(); ++w) world.send(w, kTagWork, std::string());
}

#else

bool mpi_available() { return false; }
std::shared_ptr<void> mpi_session() {
  throw UsageError("this mobisim was built without MPI (install libboost-mpi-dev and openmpi-bin, rebuild with -DMOBISIM_MPI=ON)");
}
int mpi_rank() { return 0; }
int mpi_size() { return 1; }
void execute_mpi(const std::string&, std::vector<Run>&, const std::function<void(Run&)>&) {
  throw UsageError("built without MPI");
}
void mpi_worker_loop() { throw UsageError("built without MPI"); }
void mpi_stop_workers() {}

#endif

}  // namespace mobisim::experiments::sweep
