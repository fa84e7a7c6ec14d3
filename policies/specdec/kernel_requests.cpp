#include "policies/specdec/kernel_requests.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "sim/error.h"

namespace mobisim::policies::specdec {

namespace {

constexpr int kBos = 1;

// A greedy passage of `n` tokens after BOS and a start token: the model's `key`-th most likely
// first token (mod 16), so that passages are the model's own text, and differ by key.
std::vector<int> passage(const kernel::Model& m, std::size_t key, int n) {
  kernel::KVCache cache(m.config);
  kernel::RunState st;
  const float* first = kernel::forward_token(m, cache, st, kBos);
  const int vocab = m.config.vocab_size;
  std::vector<int> order(static_cast<std::size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  const int ranks = std::min(16, vocab);
  std::partial_sort(order.begin(), order.begin() + ranks, order.end(),
                    [first](int a, int b) { return first[a] > first[b] || (first[a] == first[b] && a < b); });
  const int start = order[key % static_cast<std::size_t>(ranks)];
  const auto full = kernel::generate_greedy(m, std::vector<int>{kBos, start}, std::max(0, n - 2));
  return {full.begin(), full.begin() + std::min<std::ptrdiff_t>(n, static_cast<std::ptrdiff_t>(full.size()))};
}

}  // namespace

void KernelRequestOptions::validate(int seq_len) const {
  if (task != "ui" && task != "tweet" && task != "summary")
    throw ConfigError(fmt::format("--task '{}': expected ui, tweet or summary", task));
  auto positive = [](const char* name, int v) {
    if (v < 1) throw ConfigError(fmt::format("--{} must be at least 1 (got {})", name, v));
  };
  positive("users", users);
  positive("requests", requests);
  positive("context-tokens", context_tokens);
  positive("instruction-tokens", instruction_tokens);
  positive("output-tokens", output_tokens);
  if (top_n < 0) throw ConfigError(fmt::format("--top-n must be >= 0 (got {})", top_n));
  if (context_tokens < 3) throw ConfigError("--context-tokens must be at least 3 (BOS, seed, text)");
  if (context_tokens + instruction_tokens + output_tokens > seq_len)
    throw ConfigError(fmt::format("context {} + instruction {} + output {} tokens exceed the model's {} positions",
                                  context_tokens, instruction_tokens, output_tokens, seq_len));
}

void top_n_predictions(const kernel::Mat& logits, int vocab, int n, std::vector<std::vector<int>>& ids,
                       std::vector<std::vector<float>>& probs) {
  const int top = std::min(n, vocab);
  std::vector<int> order(static_cast<std::size_t>(vocab));
  for (Eigen::Index r = 0; r < logits.rows(); ++r) {
    const float* row = logits.row(r).data();
    const float mx = *std::max_element(row, row + vocab);
    double z = 0;
    for (int v = 0; v < vocab; ++v) z += std::exp(static_cast<double>(row[v] - mx));
    std::iota(order.begin(), order.end(), 0);
    // Highest logit first; ties to the lower id (kernel::argmax's order, so rank 0 is the greedy token).
    std::partial_sort(order.begin(), order.begin() + top, order.end(),
                      [row](int a, int b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
    ids.emplace_back(order.begin(), order.begin() + top);
    std::vector<float> p;
    for (int k = 0; k < top; ++k) p.push_back(static_cast<float>(std::exp(static_cast<double>(row[order[k]] - mx)) / z));
    probs.push_back(std::move(p));
  }
}

traces::CagRequestFile make_kernel_requests(const kernel::Model& m, const KernelRequestOptions& o,
                                            const std::string& source) {
  o.validate(m.config.seq_len);
  traces::CagRequestFile f;
  f.source = source;
  f.vocab = m.config.vocab_size;
  for (int u = 0; u < o.users; ++u) {
    const auto uu = static_cast<std::size_t>(u);
    const std::vector<int> persona = passage(m, 1000 + uu, o.context_tokens);
    for (int r = 0; r < o.requests; ++r) {
      const auto rr = static_cast<std::size_t>(r);
      traces::CagRequestRecord q;
      q.user_id = fmt::format("{}-u{}", o.task, u);
      q.task = o.task;
      if (o.task == "ui") {
        q.context = passage(m, 2000 + 2 * uu + rr % 2, o.context_tokens);  // the current screen
        q.instruction = passage(m, 3000 + uu, o.instruction_tokens + 1);   // the user's command
        q.instruction.erase(q.instruction.begin());                         // (no second BOS)
      } else if (o.task == "tweet") {
        q.context = persona;  // the user's earlier posts
        q.instruction = passage(m, 4000 + 10 * uu + rr, o.instruction_tokens + 1);  // the message to answer
        q.instruction.erase(q.instruction.begin());
      } else {
        q.context = persona;  // the document
        for (int i = 0; i < o.instruction_tokens; ++i)
          q.instruction.push_back(persona[(1 + rr * 7 + static_cast<std::size_t>(i) * 3) % persona.size()]);
      }
      std::vector<int> prompt = q.context;
      prompt.insert(prompt.end(), q.instruction.begin(), q.instruction.end());
      kernel::KVCache cache(m.config);
      kernel::RunState st;
      kernel::ForwardOptions fo;
      fo.logits = kernel::Logits::kAll;
      const kernel::Mat& logits = kernel::forward(m, cache, st, prompt, fo);
      if (o.top_n > 0) top_n_predictions(logits, m.config.vocab_size, o.top_n, q.top_ids, q.top_probs);
      const auto full = kernel::generate_greedy(m, prompt, o.output_tokens);
      q.output.assign(full.begin() + static_cast<std::ptrdiff_t>(prompt.size()), full.end());
      f.requests.push_back(std::move(q));
    }
  }
  return f;
}

}  // namespace mobisim::policies::specdec
