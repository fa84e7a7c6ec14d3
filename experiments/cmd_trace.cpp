// `mobisim trace ...`: import real workloads, generate synthetic ones, attach
// external embeddings and inspect traces. The formats are in traces/SCHEMA.md.
#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "experiments/workload_inputs.h"
#include "sim/atomic_file.h"
#include "sim/cli.h"
#include "sim/error.h"
#include "sim/params.h"
#include "models/kernel/checkpoint.h"
#include "policies/kvcache/chat_workload.h"
#include "policies/specdec/kernel_requests.h"
#include "traces/cag_requests.h"
#include "traces/cag_synth.h"
#include "traces/chat_trace.h"
#include "traces/generator.h"
#include "traces/jsonl.h"
#include "traces/qmsum.h"
#include "traces/rag_trace_io.h"
#include "traces/stats.h"

namespace mobisim {
namespace {

using traces::RagTrace;

constexpr const char* kTraceUsage =
    "mobisim trace {import qmsum|import jsonl|generate|generate-chat|cag-generate|cag-synth|stats|embeddings} [options]   (--help on each)";

void add_enrich_options(cli::ArgParser& a) {
  a.option("tokenizer", "PATH", "SentencePiece model for exact token counts (e.g. ../shared/models/llama2-tokenizer.model); "
                                "default: the documented estimate, marked tokens_exact=0")
      .option("chunk-words", "N", "words per knowledge chunk", "100")
      .option("seed", "N", "seed of the arrival model", "1")
      .option("mean-gap-s", "S", "mean gap between a user's queries in active (daytime) seconds", "14400")
      .option("retrieve-k", "K", "chunks retrieved per query and stored (0: none)", "3")
      .option("retrieval", "MODE", "bm25 | dense | hybrid", "hybrid")
      .option("fusion", "F", "hybrid fusion: rrf | weighted", "rrf")
      .option("embed-dim", "D", "dimension of the built-in embedder", "512")
      .option("anisotropy", "A", "built-in embedder calibration: cos = A + (1 - A) * raw_cos", "0.5")
      .flag("no-embed", "store no embeddings (retrieval falls back to BM25)");
}

template <class Opt>
void read_enrich_options(const cli::ArgParser& a, Opt& o) {
  o.tokenizer_path = a.maybe("tokenizer").value_or("");
  const long cw = a.get_int("chunk-words");
  if (cw <= 0) throw UsageError("--chunk-words must be > 0");
  o.chunk_words = static_cast<std::size_t>(cw);
  o.seed = static_cast<std::uint64_t>(a.get_int("seed"));
  o.arrival.mean_gap_s = a.get_real("mean-gap-s");
  const long k = a.get_int("retrieve-k");
  if (k < 0) throw UsageError("--retrieve-k must be >= 0");
  o.retrieve_k = static_cast<std::size_t>(k);
  o.retrieval.mode = traces::parse_retrieval_mode(a.get("retrieval"));
  o.retrieval.fusion = traces::parse_fusion(a.get("fusion"));
  o.embedder.dim = static_cast<int>(a.get_int("embed-dim"));
  o.embedder.anisotropy = a.get_real("anisotropy");
  o.embed = !a.flag_set("no-embed");
  o.arrival.validate();
}

void print_summary(const RagTrace& t, const std::string& out) {
  std::size_t chunks = 0, queries = 0;
  for (const auto& u : t.users) {
    chunks += u.chunks.size();
    queries += u.queries.size();
  }
  std::cout << fmt::format("wrote {}: {} users, {} chunks, {} queries (source {}, tokenizer {}, embedder {})\n", out,
                           t.users.size(), chunks, queries, t.meta.source, t.meta.tokenizer,
                           t.meta.embedder.empty() ? "none" : t.meta.embedder);
}

int import_qmsum_cmd(const std::vector<std::string>& args) {
  cli::ArgParser a("mobisim trace import qmsum --dir DIR --out FILE [options]",
                   "Import QMSum meetings as a RAG trace: one meeting = one user's knowledge base; transcript turns\n"
                   "are cut into chunks of N words; general then specific queries (or interleaved) with their\n"
                   "reference answers; arrival times from the sparse arrival model. Data is read, never copied.");
  a.option("dir", "DIR", "QMSum directory holding train/ and val/ (e.g. ../shared/data/qmsum)")
      .option("out", "FILE", "output HDF5 trace")
      .option("split", "S", "train | val | test | all", "val")
      .option("order", "O", "general-first | interleaved", "general-first")
      .option("max-meetings", "N", "import at most N meetings (0: all)", "0");
  add_enrich_options(a);
  if (!a.parse(args)) return kExitOk;
  traces::QmsumOptions o;
  o.dir = a.get("dir");
  o.split = a.get("split");
  o.order = a.get("order");
  o.max_meetings = static_cast<std::size_t>(std::max(0L, a.get_int("max-meetings")));
  read_enrich_options(a, o);
  const RagTrace t = traces::import_qmsum(o);
  traces::write_rag_trace(a.get("out"), t);
  print_summary(t, a.get("out"));
  return kExitOk;
}

int import_jsonl_cmd(const std::vector<std::string>& args) {
  cli::ArgParser a("mobisim trace import jsonl --in FILE --out FILE [options]",
                   "Import a JSONL workload (one JSON object per line; \"type\" is user, document, chunk or query;\n"
                   "see traces/jsonl.h and traces/SCHEMA.md for every key).");
  a.option("in", "FILE", "input .jsonl file").option("out", "FILE", "output HDF5 trace");
  add_enrich_options(a);
  if (!a.parse(args)) return kExitOk;
  traces::JsonlOptions o;
  read_enrich_options(a, o);
  const RagTrace t = traces::import_jsonl(a.get("in"), o);
  traces::write_rag_trace(a.get("out"), t);
  print_summary(t, a.get("out"));
  return kExitOk;
}

int generate_cmd(const std::vector<std::string>& args) {
  cli::ArgParser a("mobisim trace generate CONFIG --out FILE [-p key=value ...] [--seed N]",
                   "Generate a synthetic RAG trace whose statistics follow PerCache's observations (repeated chunk\n"
                   "retrieval, low prefix overlap, sparse mostly dissimilar queries with a few 0.8+ pairs).\n"
                   "CONFIG: e.g. configs/workloads/rag_default.yaml; unknown keys are errors.");
  a.positional("CONFIG", "generator YAML config")
      .option("out", "FILE", "output HDF5 trace")
      .repeated("param", "p", "KEY=VALUE", "override a config value, e.g. -p users=10 -p queries.per_user=40")
      .option("seed", "N", "seed (default: the config's seed)");
  if (!a.parse(args)) return kExitOk;
  const std::string cfg = a.get("CONFIG");
  YAML::Node root = load_yaml_file(cfg);
  for (const auto& kv : a.all("param")) apply_override(root, kv);
  std::optional<std::uint64_t> seed;
  if (a.has("seed")) seed = static_cast<std::uint64_t>(a.get_int("seed"));
  // Users are written as they are generated (a million queries never sit in memory) unless chunks
  // arrive late: the schema version then depends on the whole trace, which is generated first.
  const std::string out = a.get("out");
  std::unique_ptr<traces::RagTraceWriter> writer;
  RagTrace all;  // late chunks only
  std::size_t n_users = 0, chunks = 0, queries = 0;
  auto begin = [&](const traces::RagTraceMeta& meta, std::size_t users, bool late) {
    all.meta = meta;
    n_users = users;
    if (!late) writer = std::make_unique<traces::RagTraceWriter>(out, meta, users, 1);
  };
  auto sink = [&](traces::UserTrace&& u) {
    chunks += u.chunks.size();
    queries += u.queries.size();
    all.users.push_back(std::move(u));
    if (!writer) return;
    traces::validate_rag_trace(all, out);
    if (traces::rag_schema_version_needed(all) != 1) throw Error(out + ": a chunk arrives late in a trace generated without late chunks");
    writer->add_user(all.users.back());
    all.users.clear();
  };
  traces::generate_rag_trace_streaming_from_yaml(root, cfg, seed, begin, sink);
  if (writer) {
    writer->commit();
  } else {
    traces::write_rag_trace(out, all);
  }
  std::cout << fmt::format("wrote {}: {} users, {} chunks, {} queries (source {}, tokenizer {}, embedder {})\n", out,
                           n_users, chunks, queries, all.meta.source, all.meta.tokenizer,
                           all.meta.embedder.empty() ? "none" : all.meta.embedder);
  return kExitOk;
}

int generate_chat_cmd(const std::vector<std::string>& args) {
  cli::ArgParser a("mobisim trace generate-chat [CONFIG.yaml] --out FILE.h5 [--seed N] [-p key=value ...]",
                   "Generate a day of chat sessions for prefix caching (policies/kvcache/chat_workload.h: system\n"
                   "prompt variants with ~90% overlap, user context, history, diurnal arrivals) and write them as a\n"
                   "chat trace (format mobisim-chat-trace, traces/SCHEMA.md). CONFIG: a YAML mapping of the\n"
                   "generator's keys (sessions, system_prompts, variant_overlap, ...: ChatWorkloadConfig in\n"
                   "policies/kvcache/chat_workload.h); without it, the defaults. Replay it with\n"
                   "`workload: {trace: FILE.h5}` in experiments/prefix_cache/*.yaml. The same config and seed\n"
                   "give a byte-identical file.");
  a.positional("CONFIG", "generator YAML config (optional)", false)
      .option("out", "FILE", "output HDF5 chat trace")
      .repeated("param", "p", "KEY=VALUE", "override a generator key, e.g. -p sessions=100 -p system_prompts=3")
      .option("seed", "N", "seed of the generator", "1");
  if (!a.parse(args)) return kExitOk;
  const std::string cfg = a.maybe("CONFIG").value_or("");
  YAML::Node root = cfg.empty() ? YAML::Node(YAML::NodeType::Map) : load_yaml_file(cfg);
  for (const auto& kv : a.all("param")) apply_override(root, kv);
  const long seed = a.get_int("seed");
  if (seed < 0) throw UsageError("--seed must be >= 0");
  ConfigSource src;
  if (!cfg.empty()) src.file = std::make_shared<const std::string>(cfg);
  const Params p(root, policies::kvcache::ChatWorkloadConfig::schema(), src, {});
  const auto wc = policies::kvcache::ChatWorkloadConfig::from_params(p);
  const auto sessions = policies::kvcache::generate_chat_sessions(wc, static_cast<std::uint64_t>(seed), 0);
  const auto t = policies::kvcache::to_chat_trace(
      sessions, wc, fmt::format("generator:chat_workload(seed={}, run=0)", seed), yaml_to_string(p.resolved()));
  const std::string out = a.get("out");
  traces::write_chat_trace(out, t);
  std::size_t tokens = 0;
  for (const auto& s : t.sessions) tokens += s.prompt_token_ids.size();
  std::cout << fmt::format("wrote {}: {} chat sessions, {} prompt tokens, {} system prompt variants (seed {})\n", out,
                           t.sessions.size(), tokens, t.system_prompts, seed);
  return kExitOk;
}

int cag_generate_cmd(const std::vector<std::string>& args) {
  cli::ArgParser a("mobisim trace cag-generate --model CHECKPOINT --task ui|tweet|summary --out FILE.jsonl|FILE.h5",
                   "Write CAG requests made by the real transformer (policies/specdec/kernel_requests.h): contexts and\n"
                   "outputs are the model's greedy text, and every prompt position carries the top-n next-token ids\n"
                   "and probabilities of the real prefill. Format: traces/SCHEMA.md, \"CAG request files\"; replay\n"
                   "with `workload: {requests: FILE}` in experiments/coordgen/*.yaml. Deterministic.");
  a.option("model", "CHECKPOINT", "a checkpoint the kernel loads (e.g. ../shared/models/stories260K.bin)")
      .option("task", "T", "ui | tweet | summary", "ui")
      .option("users", "N", "users", "2")
      .option("requests", "N", "requests per user", "3")
      .option("context-tokens", "N", "context tokens per request", "96")
      .option("instruction-tokens", "N", "instruction tokens per request", "6")
      .option("output-tokens", "N", "output tokens per request", "24")
      .option("top-n", "N", "prefill predictions per prompt position (0: none)", "4")
      .option("out", "FILE", "output .jsonl or .h5");
  if (!a.parse(args)) return kExitOk;
  policies::specdec::KernelRequestOptions o;
  o.task = a.get("task");
  o.users = static_cast<int>(a.get_int("users"));
  o.requests = static_cast<int>(a.get_int("requests"));
  o.context_tokens = static_cast<int>(a.get_int("context-tokens"));
  o.instruction_tokens = static_cast<int>(a.get_int("instruction-tokens"));
  o.output_tokens = static_cast<int>(a.get_int("output-tokens"));
  o.top_n = static_cast<int>(a.get_int("top-n"));
  const std::string model_path = a.get("model");
  if (!path_exists(model_path)) throw UsageError(fmt::format("--model: no checkpoint '{}'", model_path));
  const auto model = kernel::load_model(model_path);
  const auto f = policies::specdec::make_kernel_requests(
      model, o, fmt::format("kernel:{} greedy, task {}", std::filesystem::path(model_path).filename().string(), o.task));
  const std::string out = a.get("out");
  traces::write_cag_requests(out, f);
  std::cout << fmt::format("wrote {}: {} {} requests of {} users from {} (top-{} prefill predictions)\n", out,
                           f.requests.size(), o.task, o.users, model_path, o.top_n);
  return kExitOk;
}

int cag_synth_cmd(const std::vector<std::string>& args) {
  cli::ArgParser a("mobisim trace cag-synth CONFIG.yaml --out FILE.jsonl|FILE.h5 [-p key=value ...]",
                   "Write synthetic CAG requests (traces/cag_synth.h): outputs copied from the context in spans,\n"
                   "with novel tokens, history copies and model-preferred variants carried by the stored prefill\n"
                   "top-n. CONFIG: a coordgen experiment YAML (its experiment.workload.synthetic mapping is used,\n"
                   "e.g. experiments/coordgen/table4_calibrated_workload.yaml) or a bare mapping of the generator's\n"
                   "keys (traces/SCHEMA.md, \"Synthetic CAG requests\"). Deterministic.");
  a.positional("CONFIG", "experiment YAML or generator mapping")
      .option("out", "FILE", "output .jsonl or .h5")
      .repeated("param", "p", "KEY=VALUE", "override a value of the file, e.g. -p experiment.workload.synthetic.seed=2");
  if (!a.parse(args)) return kExitOk;
  const std::string cfg = a.get("CONFIG");
  YAML::Node root = load_yaml_file(cfg);
  for (const auto& kv : a.all("param")) apply_override(root, kv);
  ConfigSource src{std::make_shared<const std::string>(cfg), ""};
  YAML::Node node = root;
  const YAML::Node exp = root["experiment"];
  if (exp.IsDefined() && exp.IsMap()) {
    const YAML::Node w = exp["workload"];
    if (!w.IsDefined() || !w.IsMap() || !w["synthetic"].IsDefined())
      throw ConfigError(fmt::format("{}: no experiment.workload.synthetic mapping", cfg));
    node = w["synthetic"];
    src = src.child("experiment").child("workload").child("synthetic");
  }
  const auto synthetic = experiments::resolve_workload_config(node, src);
  const Params y(synthetic.config, traces::cag_synth_schema(), synthetic.source, {});
  traces::CagSynthStats st;
  const auto f = traces::synthesize_cag_requests(traces::cag_synth_params(y), &st);
  const std::string out = a.get("out");
  traces::write_cag_requests(out, f);
  std::cout << fmt::format("wrote {}: {} requests; {} copied tokens ({} from history, {} variants) in {} spans, {} novel\n",
                           out, f.requests.size(), st.copied_tokens, st.history_tokens, st.variant_tokens, st.spans,
                           st.novel_tokens);
  return kExitOk;
}

std::string plot_script() {
  if (const char* d = std::getenv("MOBISIM_PLOTS_DIR")) return std::string(d) + "/trace_stats.py";
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  for (auto dir = exe.parent_path(); !ec && !dir.empty() && dir != dir.root_path(); dir = dir.parent_path())
    if (path_exists((dir / "plots" / "trace_stats.py").string())) return (dir / "plots" / "trace_stats.py").string();
  throw UsageError("cannot find plots/trace_stats.py next to the mobisim binary; set MOBISIM_PLOTS_DIR");
}

std::string shell_quote(const std::string& s) {
  std::string o = "'";
  for (char c : s) o += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return o + "'";
}

int stats_cmd(const std::vector<std::string>& args) {
  cli::ArgParser a("mobisim trace stats FILE [--k K] [--json OUT] [--plot PNG]",
                   "Print workload statistics of a RAG trace: queries per user, chunk retrieval frequency\n"
                   "(PerCache fig. 3), prefix overlap of retrieved lists under reactive caching (fig. 5), top-1\n"
                   "similarity of each query to earlier ones (fig. 6), pairwise similarity (fig. 2), token lengths.");
  a.positional("FILE", "HDF5 RAG trace")
      .option("k", "K", "top-k used for retrieval statistics (PerCache: 2)", "2")
      .option("json", "OUT", "also write the statistics (with raw per-query values) as JSON")
      .option("plot", "PNG", "draw the distributions with plots/trace_stats.py (matplotlib)");
  if (!a.parse(args)) return kExitOk;
  const RagTrace t = traces::read_rag_trace(a.get("FILE"));
  traces::StatsOptions so;
  const long k = a.get_int("k");
  if (k <= 0) throw UsageError("--k must be > 0");
  so.k = static_cast<std::size_t>(k);
  const auto s = traces::compute_stats(t, so);
  std::cout << traces::format_stats(s);
  std::string json_path = a.maybe("json").value_or("");
  if (!json_path.empty()) write_file_atomic(json_path, traces::stats_json(s));
  if (auto png = a.maybe("plot")) {
    if (json_path.empty()) {
      json_path = *png + ".stats.json";
      write_file_atomic(json_path, traces::stats_json(s));
    }
    const std::string cmd = fmt::format("/usr/bin/python3 {} --stats {} --out {}", shell_quote(plot_script()),
                                        shell_quote(json_path), shell_quote(*png));
    const int rc = std::system(cmd.c_str());
    if (rc != 0) throw Error(fmt::format("plot command failed (exit {}): {}", rc, cmd));
    std::cout << "wrote " << *png << "\n";
  }
  return kExitOk;
}

int embeddings_cmd(const std::vector<std::string>& args) {
  cli::ArgParser a("mobisim trace embeddings TRACE --from FILE [--queries NPY] [--model NAME] --out FILE",
                   "Replace a trace's embeddings with an external model's (e.g. Qwen3-Embedding, as PerCache).\n"
                   "FILE: HDF5 with /chunk_embeddings [C,D] and /query_embeddings [Q,D], or a chunk .npy with\n"
                   "--queries giving the query .npy. Rows in trace order; each row is L2-normalised.");
  a.positional("TRACE", "input HDF5 RAG trace")
      .option("from", "FILE", "HDF5 or .npy embeddings")
      .option("queries", "NPY", "query embeddings .npy (when --from is a .npy)")
      .option("model", "NAME", "embedding model name recorded in the trace")
      .option("out", "FILE", "output HDF5 trace");
  if (!a.parse(args)) return kExitOk;
  RagTrace t = traces::read_rag_trace(a.get("TRACE"));
  traces::import_embeddings(t, a.get("from"), a.maybe("queries").value_or(""), a.maybe("model").value_or(""));
  traces::write_rag_trace(a.get("out"), t);
  print_summary(t, a.get("out"));
  return kExitOk;
}

int trace_main(const std::vector<std::string>& args) {
  auto rest = [&](std::size_t n) { return std::vector<std::string>(args.begin() + static_cast<long>(n), args.end()); };
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::cout << "usage: " << kTraceUsage << "\n\n"
              << "  import qmsum   import QMSum meetings (one meeting = one user)\n"
              << "  import jsonl   import a JSONL workload (documented format)\n"
              << "  generate       generate a calibrated synthetic RAG trace from a YAML config\n"
              << "  generate-chat  generate a chat-session trace (prefix caching) from the chat workload generator\n"
              << "  cag-generate   CAG requests (ui, tweet, summary) made by the real transformer, with prefill top-n\n"
              << "  cag-synth      synthetic CAG requests (copied spans, variants in the stored top-n)\n"
              << "  stats          print (and plot) workload statistics of a trace\n"
              << "  embeddings     attach embeddings from an external model to a trace\n";
    return args.empty() ? kExitUsage : kExitOk;
  }
  if (args[0] == "import") {
    if (args.size() >= 2 && args[1] == "qmsum") return import_qmsum_cmd(rest(2));
    if (args.size() >= 2 && args[1] == "jsonl") return import_jsonl_cmd(rest(2));
    if (args.size() >= 2 && (args[1] == "--help" || args[1] == "-h")) {
      std::cout << "usage: mobisim trace import {qmsum|jsonl} [options]   (--help on each)\n\n"
                << "  qmsum   QMSum meetings: one meeting = one user, its queries and reference answers\n"
                << "  jsonl   a JSONL workload (users, documents, chunks, queries; docs/formats.md)\n";
      return kExitOk;
    }
    throw UsageError("usage: mobisim trace import {qmsum|jsonl} [options] (mobisim trace import --help)");
  }
  if (args[0] == "generate") return generate_cmd(rest(1));
  if (args[0] == "generate-chat") return generate_chat_cmd(rest(1));
  if (args[0] == "cag-generate") return cag_generate_cmd(rest(1));
  if (args[0] == "cag-synth") return cag_synth_cmd(rest(1));
  if (args[0] == "stats") return stats_cmd(rest(1));
  if (args[0] == "embeddings") return embeddings_cmd(rest(1));
  throw UsageError(fmt::format("unknown trace subcommand '{}'\nusage: {}", args[0], kTraceUsage));
}

}  // namespace
}  // namespace mobisim

MOBISIM_REGISTER_COMMAND("trace", "Import, generate and inspect RAG and chat workload traces", mobisim::kTraceUsage,
                         mobisim::trace_main)
