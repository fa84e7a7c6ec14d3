#include "policies/specdec/kernel_oracles.h"

#include <fmt/format.h>

#include <algorithm>

#include "policies/specdec/retrieval_drafter.h"

namespace mobisim::policies::specdec {

std::vector<kernel::OracleRow> coordgen_oracles(const kernel::Model& m, int context_tokens, int steps,
                                                std::uint64_t seed) {
  const int room = m.config.seq_len - 2;
  context_tokens = std::clamp(context_tokens, 1, room / 2);
  steps = std::clamp(steps, 1, room - context_tokens);
  const auto context = kernel::sample_sequence(m, context_tokens, seed);
  const auto ref = kernel::generate_greedy(m, context, steps);
  HistoryStore history;
  const auto earlier_prompt = kernel::sample_sequence(m, std::max(1, context_tokens / 2), seed + 1);
  const auto earlier = kernel::generate_greedy(m, earlier_prompt, std::min(steps, room - context_tokens / 2));
  history.add(std::span<const int>(earlier).subspan(earlier_prompt.size()));
  std::vector<kernel::OracleRow> rows;
  for (auto retriever : {Retriever::kPld, Retriever::kSam})
    for (int mode = 0; mode < 4; ++mode) {
      DrafterOptions o;
      o.retriever = retriever;
      o.calibrate = mode & 1;
      o.reuse = mode & 2;
      o.budget = 15;
      CoordGenDrafter d(o, &history);
      const DecodeTrace t = speculative_decode(m, context, steps, d);
      int same = 0;
      while (same < static_cast<int>(std::min(t.tokens.size(), ref.size())) && t.tokens[same] == ref[same]) ++same;
      kernel::OracleRow r;
      r.id = "9/" + d.name();
      r.compared = fmt::format("CoordGen drafting vs plain greedy ({} context, {} tokens)", context_tokens, steps);
      r.metric = "tokens identical";
      r.value = same;
      r.threshold = "= " + std::to_string(ref.size());
      r.must_pass = true;
      r.pass = t.tokens == ref;
      r.note = fmt::format("{:.2f} accepted/verify, {} verify steps{}", t.accepted_per_step(), t.steps.size(),
                           d.calibrated() ? fmt::format(", {} calibrated nodes", d.calibrated()->nodes()) : "");
      rows.push_back(std::move(r));
    }
  return rows;
}

}  // namespace mobisim::policies::specdec
