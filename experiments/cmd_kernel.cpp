// `mobisim kernel {generate|check|trace}`: runs the real transformer kernel
// (models/kernel) on a llama2.c or GGUF checkpoint or on a seeded synthetic model.
#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "models/kernel/checkpoint.h"
#include "models/kernel/oracles.h"
#include "policies/specdec/kernel_oracles.h"
#include "models/kernel/trace.h"
#include "models/kernel/transformer.h"
#include "models/tokenizer.h"
#include "sim/cli.h"
#include "sim/error.h"

namespace mobisim {
namespace {

using namespace mobisim::kernel;

// Where the shared models and data live: $MOBISIM_SHARED_DIR, else ../shared.
std::string shared_dir() {
  if (const char* env = std::getenv("MOBISIM_SHARED_DIR"); env && *env) return env;
  return "../shared";
}

void add_model_options(cli::ArgParser& p) {
  p.option("model", "PATH", "llama2.c checkpoint (.bin) or GGUF file");
  p.flag("synthetic", "use a seeded synthetic model with stories260K's dimensions instead of --model");
  p.option("seed", "N", "seed of the synthetic model and of sampled sequences", "7");
}

Model model_from(const cli::ArgParser& p) {
  if (p.flag_set("synthetic")) {
    if (p.has("model")) throw UsageError("give either --model or --synthetic, not both");
    return make_synthetic(tiny_config(), static_cast<std::uint64_t>(p.get_int("seed")));
  }
  if (!p.has("model")) throw UsageError("--model PATH or --synthetic is required");
  return load_model(p.get("model"));
}

std::vector<int> parse_ids(const std::string& s) {
  std::vector<int> ids;
  std::istringstream in(s);
  std::string tok;
  while (in >> tok) {
    try {
      std::size_t used = 0;
      const long v = std::stol(tok, &used);
      if (used != tok.size() || v < 0 || v > (1L << 30)) throw std::invalid_argument(tok);
      ids.push_back(static_cast<int>(v));
    } catch (const std::exception&) {
      throw UsageError(fmt::format("token id '{}' is not a non-negative integer", tok));
    }
  }
  return ids;
}

// The README of ../shared/models gives stories260K's greedy ids from BOS.
const std::vector<int> kStoriesGreedy = {461, 461, 401, 401, 401, 461, 378, 455, 473, 456, 435, 299};

int cmd_generate(const std::vector<std::string>& args) {
  cli::ArgParser p("mobisim kernel generate (--model PATH | --synthetic) [options]",
                   "Greedy generation with the real kernel; prints token ids (and text with --tokenizer).");
  add_model_options(p);
  p.option("tokenizer", "PATH", "SentencePiece model to encode --prompt and decode the output");
  p.option("steps", "N", "tokens to generate", "64");
  p.option("prompt", "TEXT", "prompt text (needs --tokenizer)");
  p.option("prompt-ids", "\"1 2 3\"", "prompt as token ids (default: BOS = 1)");
  if (!p.parse(args)) return kExitOk;
  const Model m = model_from(p);
  std::unique_ptr<models::Tokenizer> tok;
  if (p.has("tokenizer")) tok = models::load_sentencepiece(p.get("tokenizer"));
  std::vector<int> prompt{1};
  if (p.has("prompt") && p.has("prompt-ids")) throw UsageError("give --prompt or --prompt-ids, not both");
  if (p.has("prompt")) {
    if (!tok) throw UsageError("--prompt needs --tokenizer (or use --prompt-ids)");
    prompt = tok->encode(p.get("prompt"));
    prompt.insert(prompt.begin(), tok->bos_id());
  } else if (p.has("prompt-ids")) {
    prompt = parse_ids(p.get("prompt-ids"));
    if (prompt.empty()) throw UsageError("--prompt-ids is empty");
  }
  const long steps = p.get_int("steps");
  if (steps < 0) throw UsageError("--steps must be >= 0");
  const auto t0 = std::chrono::steady_clock::now();
  const auto out = generate_greedy(m, prompt, static_cast<int>(steps));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::vector<int> gen(out.begin() + static_cast<long>(prompt.size()), out.end());
  std::cout << fmt::format("model: {} (dim {}, layers {}, heads {}/{}, vocab {}, rope {})\n", m.source, m.config.dim,
                           m.config.n_layers, m.config.n_heads, m.config.n_kv_heads, m.config.vocab_size,
                           to_string(m.config.rope));
  std::cout << "prompt ids: " << fmt::format("{}", fmt::join(prompt, " ")) << "\n";
  std::cout << "generated ids: " << fmt::format("{}", fmt::join(gen, " ")) << "\n";
  if (tok) {
    if (tok->vocab_size() == m.config.vocab_size)
      std::cout << "text: " << tok->decode(out) << "\n";
    else
      std::cout << fmt::format("(tokenizer has {} pieces, the model {}: text not shown)\n", tok->vocab_size(),
                               m.config.vocab_size);
  }
  std::cout << fmt::format("{} tokens in {:.3f} s ({:.0f} tok/s incl. prefill)\n", out.size(), s,
                           s > 0 ? out.size() / s : 0.0);
  return kExitOk;
}

int cmd_check(const std::vector<std::string>& args) {
  cli::ArgParser p("mobisim kernel check (--model PATH | --synthetic) [options]",
                   "Runs the correctness oracles 1-8 on the model and prints one row per check. Exit code 1 when a "
                   "must-pass oracle fails.");
  add_model_options(p);
  p.option("tokenizer", "PATH", "SentencePiece model for oracle 5",
           shared_dir() + "/models/llama2-tokenizer.model");
  p.option("qmsum", "DIR", "qmsum meetings (*.json) for oracle 5", shared_dir() + "/data/qmsum/val");
  p.option("expected-ids", "\"461 461 ...\"",
           "oracle 1: greedy ids from BOS to reproduce (default: README's ids when the model is stories260K.bin)");
  p.option("long-tokens", "N", "sequence length for oracle 8", "480");
  if (!p.parse(args)) return kExitOk;
  const Model m = model_from(p);
  OracleOptions o;
  o.seed = static_cast<std::uint64_t>(p.get_int("seed"));
  o.tokenizer_path = p.get("tokenizer");
  o.qmsum_dir = p.get("qmsum");
  o.long_tokens = static_cast<int>(p.get_int("long-tokens"));
  if (p.has("expected-ids"))
    o.expected_greedy = parse_ids(p.get("expected-ids"));
  else if (p.has("model") && std::filesystem::path(p.get("model")).filename() == "stories260K.bin")
    o.expected_greedy = kStoriesGreedy;
  std::cout << fmt::format("model: {} (dim {}, layers {}, heads {}/{}, vocab {}, rope {})\n", m.source, m.config.dim,
                           m.config.n_layers, m.config.n_heads, m.config.n_kv_heads, m.config.vocab_size,
                           to_string(m.config.rope));
  auto rows = run_all_oracles(m, o);
  for (auto& r : policies::specdec::coordgen_oracles(m, 96, 96, o.seed)) rows.push_back(std::move(r));  // oracle 9
  std::cout << format_oracle_table(rows);
  const bool ok = all_must_pass(rows);
  std::cout << (ok ? "all must-pass oracles passed\n" : "a must-pass oracle FAILED\n");
  return ok ? kExitOk : kExitFailure;
}

int cmd_trace(const std::vector<std::string>& args) {
  cli::ArgParser p("mobisim kernel trace (--model PATH | --synthetic) --out FILE.h5 [options]",
                   "Runs a sequence through the kernel and writes per-layer K/V and attention statistics to HDF5 "
                   "(layout: models/kernel/TRACE_FORMAT.md).");
  add_model_options(p);
  p.option("out", "FILE.h5", "output file");
  p.option("tokens", "N", "sequence length (prompt included)", "256");
  p.option("prompt-ids", "\"1 2 3\"", "prompt token ids (default: BOS = 1)");
  p.option("mode", "greedy|sample", "how the sequence continues after the prompt", "sample");
  p.option("top-k", "K", "top-k used for the attention-mass statistic", "32");
  if (!p.parse(args)) return kExitOk;
  if (!p.has("out")) throw UsageError("--out FILE.h5 is required");
  const Model m = model_from(p);
  TraceOptions t;
  t.tokens = static_cast<int>(p.get_int("tokens"));
  t.seed = static_cast<std::uint64_t>(p.get_int("seed"));
  t.top_k = static_cast<int>(p.get_int("top-k"));
  t.mode = p.get("mode");
  if (t.mode != "greedy" && t.mode != "sample") throw UsageError("--mode must be greedy or sample");
  if (p.has("prompt-ids")) t.prompt = parse_ids(p.get("prompt-ids"));
  const auto summary = write_trace(m, p.get("out"), t);
  std::cout << summary;
  return kExitOk;
}

int kernel_main(const std::vector<std::string>& args) {
  const std::string usage =
      "usage: mobisim kernel {generate|check|trace} [options]   (each with --help)\n\n"
      "  generate   greedy decoding with the real Eigen transformer (llama2.c or GGUF checkpoint)\n"
      "  check      run the correctness oracles (prefix/QKV reuse, KVPR/Cake, speculation, clusters)\n"
      "  trace      write per-layer K/V and attention statistics to HDF5 (models/kernel/TRACE_FORMAT.md)\n";
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::cout << usage;
    return args.empty() ? kExitUsage : kExitOk;
  }
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (args[0] == "generate") return cmd_generate(rest);
  if (args[0] == "check") return cmd_check(rest);
  if (args[0] == "trace") return cmd_trace(rest);
  throw UsageError(fmt::format("unknown kernel subcommand '{}'\n{}", args[0], usage));
}

}  // namespace
}  // namespace mobisim

MOBISIM_REGISTER_COMMAND("kernel", "Run the real transformer kernel (generate, correctness oracles, traces)",
                         "mobisim kernel {generate|check|trace} [options]", mobisim::kernel_main)
