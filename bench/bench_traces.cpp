// Workload-layer speed targets (issue "Workloads"): importing all 197 QMSum
// meetings in under 30 s, and top-3 retrieval over a 100-chunk knowledge base
// in under 1 ms.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>

#include "sim/h5.h"
#include "sim/params.h"
#include "traces/generator.h"
#include "traces/qmsum.h"
#include "traces/retrieval.h"

namespace {

using namespace mobisim::traces;

// ../shared: MOBISIM_SHARED_DIR, else the first ancestor of the binary with a sibling "shared".
std::string shared_dir() {
  if (const char* d = std::getenv("MOBISIM_SHARED_DIR")) return d;
  std::error_code ec;
  auto dir = std::filesystem::read_symlink("/proc/self/exe", ec).parent_path();
  for (; !ec && !dir.empty() && dir != dir.root_path(); dir = dir.parent_path())
    if (std::filesystem::is_directory(dir / "shared" / "data" / "qmsum")) return (dir / "shared").string();
  return "";
}

void BM_ImportQmsumAll(benchmark::State& state) {
  const std::string shared = shared_dir();
  if (shared.empty()) {
    state.SkipWithError("QMSum data not found (set MOBISIM_SHARED_DIR)");
    return;
  }
  QmsumOptions o;
  o.dir = shared + "/data/qmsum";
  o.split = "all";
  const std::string tok = shared + "/models/llama2-tokenizer.model";
  if (std::filesystem::exists(tok)) o.tokenizer_path = tok;
  std::size_t queries = 0;
  for (auto _ : state) {
    const RagTrace t = import_qmsum(o);  // JSON, chunking, SentencePiece, embeddings, top-3 hybrid retrieval
    queries = 0;
    for (const auto& u : t.users) queries += u.queries.size();
    benchmark::DoNotOptimize(queries);
  }
  state.counters["queries"] = static_cast<double>(queries);
}
BENCHMARK(BM_ImportQmsumAll)->Iterations(1)->Unit(benchmark::kSecond);

struct Kb {
  std::vector<std::string> chunks;
  std::vector<std::string> queries;
};

Kb knowledge_base() {
  // One generated user: 100 chunks of 100 words, 20 queries.
  YAML::Node root = mobisim::load_yaml_string("users: 1\nretrieval: {k: 0}\n", "bench");
  const RagTrace t = generate_rag_trace_from_yaml(root, "bench", 1);
  Kb kb;
  for (const auto& c : t.users[0].chunks) kb.chunks.push_back(c.text);
  for (const auto& q : t.users[0].queries) kb.queries.push_back(q.text);
  return kb;
}

void BM_RetrieveTop3Hybrid100Chunks(benchmark::State& state) {
  const Kb kb = knowledge_base();
  const Retriever r(kb.chunks, {});
  std::size_t i = 0;
  for (auto _ : state) {
    // Includes embedding the query text, as for a predicted query inside the simulation.
    auto hits = r.retrieve(kb.queries[i++ % kb.queries.size()], {}, 3);
    benchmark::DoNotOptimize(hits);
  }
}
BENCHMARK(BM_RetrieveTop3Hybrid100Chunks)->Unit(benchmark::kMicrosecond);

void BM_RetrieveTop3Bm25_100Chunks(benchmark::State& state) {
  const Kb kb = knowledge_base();
  RetrieverConfig c;
  c.mode = RetrievalMode::kBm25;
  const Retriever r(kb.chunks, {}, c);
  std::size_t i = 0;
  for (auto _ : state) {
    auto hits = r.retrieve(kb.queries[i++ % kb.queries.size()], {}, 3);
    benchmark::DoNotOptimize(hits);
  }
}
BENCHMARK(BM_RetrieveTop3Bm25_100Chunks)->Unit(benchmark::kMicrosecond);

}  // namespace

// ---------------------------------------------------------------------------
// Replay throughput (issue 12 "Scale"): simulated queries per second per core of the rag_qa
// driver over a generated trace read from disk (users x 20 queries), for Naive alone, PerCache
// alone and the quick-start's seven policies. Targets: naive >= 50k, PerCache >= 2k queries/s.
// One thread (--threads 1); the rate is per CPU second of that thread (per core).
// ---------------------------------------------------------------------------

#include "experiments/experiment.h"
#include "sim/builtin_configs.h"
#include "traces/rag_trace_io.h"

namespace {

std::string replay_trace(int users, int queries_per_user) {
  const std::string name = "mobisim-bench-replay-" + std::to_string(users) +
                           (queries_per_user == 20 ? std::string() : "x" + std::to_string(queries_per_user)) + ".h5";
  const std::string path = (std::filesystem::temp_directory_path() / name).string();
  if (std::filesystem::exists(path)) return path;
  std::string text, origin;
  mobisim::find_config("workloads", "rag_default", text, origin);
  YAML::Node cfg = mobisim::load_yaml_string(text, origin);
  cfg["users"] = users;
  cfg["queries"]["per_user"] = queries_per_user;
  write_rag_trace(path, generate_rag_trace_from_yaml(cfg, origin));
  return path;
}

void replay_rag(benchmark::State& state, int queries_per_user) {
  const int users = static_cast<int>(state.range(1));
  const std::string trace = replay_trace(users, queries_per_user);
  const char* sets[] = {"[{impl: naive}]", "[{impl: percache, knowledge_type: personal notes}]",
                        "[{impl: naive}, {impl: ragcache}, {impl: meancache}, {impl: sleeptime, knowledge_type: personal "
                        "notes}, {impl: ragcache_meancache}, {impl: ragcache_sleeptime, knowledge_type: personal notes}, "
                        "{impl: percache, knowledge_type: personal notes}]"};
  const int set = static_cast<int>(state.range(0));
  const std::string out = (std::filesystem::temp_directory_path() / "mobisim-bench-replay-out.h5").string();
  const std::string yaml = "name: bench_replay\nseed: 1\noutput: " + out +
                           "\nexperiment:\n  impl: rag_qa\n  device: pixel7\n  model: {base: llama-3.2-3b, "
                           "weight_dtype: int4, activation_dtype: fp32, kv_dtype: fp32}\n  workload: {trace: " +
                           trace + "}\n  pipeline: {compute_unit: cpu, system_prompt_tokens: 64, top_k: 3}\n  policies: " +
                           sets[set] + "\n";
  mobisim::experiments::RunOptions o;
  o.quiet = true;
  o.no_plot = true;
  o.threads = 1;
  for (auto _ : state) {
    if (mobisim::experiments::run_experiment(mobisim::load_yaml_string(yaml, "bench"), "bench", o) != 0)
      state.SkipWithError("run failed");
  }
  const double n_policies = set == 2 ? 7 : 1;
  state.counters["queries/s"] =
      benchmark::Counter(n_policies * users * queries_per_user * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
  std::filesystem::remove(out);
}

void BM_ReplayRag(benchmark::State& state) { replay_rag(state, 20); }
BENCHMARK(BM_ReplayRag)->Args({0, 200})->Args({1, 20})->Args({2, 20})->Unit(benchmark::kSecond);

// The same with long users, as in a month-long study (the 1M-query trace: 500 users x 2,000
// queries): 10 users x 2,000 queries, where the per-user costs (opening a user's datasets in the
// trace, writing its statistics groups) are spread over 100 times more queries than above.
void BM_ReplayRagLongUsers(benchmark::State& state) { replay_rag(state, 2000); }
// PerCache on 2 such users: its QA bank, KV tree and prediction history grow with a user's
// queries, so this is where per-query costs that scale with the history show.
BENCHMARK(BM_ReplayRagLongUsers)->Args({0, 10})->Args({1, 2})->Unit(benchmark::kSecond);

// Streaming a rag_qa-shaped record table (1 string, 9 integer, 22 float columns) through an
// h5::SpooledTable in 1,000-row batches (one block of users' records), then writing it to a
// result file: rows per second of the whole path, with memory bounded by the 2,048-row buffer.
void BM_SpoolRecords(benchmark::State& state) {
  const auto rows = static_cast<std::size_t>(state.range(0));
  constexpr std::size_t kBatch = 1000;
  mobisim::h5::Table batch;
  batch.add("user", std::vector<std::string>(kBatch, "user-0042"));
  // Column names built with append(): GCC 12's -Wrestrict misfires on "x" + std::string.
  for (int c = 0; c < 9; ++c) batch.add(std::string("i").append(std::to_string(c)), std::vector<std::int64_t>(kBatch, c), "count");
  for (int c = 0; c < 22; ++c) {
    std::vector<double> v(kBatch);
    for (std::size_t r = 0; r < kBatch; ++r) v[r] = 0.001 * static_cast<double>(r * static_cast<std::size_t>(c + 1));
    batch.add(std::string("d").append(std::to_string(c)), std::move(v), "s");
  }
  const auto dir = std::filesystem::temp_directory_path();
  for (auto _ : state) {
    mobisim::h5::SpooledTable spool((dir / "mobisim-bench-spool").string());
    for (std::size_t done = 0; done < rows; done += kBatch) spool.append(batch);
    spool.finish();
    mobisim::h5::Writer w((dir / "mobisim-bench-spool-out.h5").string());  // not committed: removed
    spool.write(w.root(), "records");
  }
  state.counters["rows/s"] = benchmark::Counter(static_cast<double>(rows * state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_SpoolRecords)->Arg(100'000)->Arg(1'000'000)->Unit(benchmark::kMillisecond);

}  // namespace
