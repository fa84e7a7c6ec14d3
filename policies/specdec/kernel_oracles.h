#pragma once
// CoordGen rows of `mobisim kernel check` (oracle 9): every retrieval drafter (PLD, SAM with a
// history store) alone, with in-context calibration from the real prefill logits, with draft
// reuse, and with both, against plain greedy decoding on the real kernel. Must pass: identical tokens.
#include <cstdint>
#include <vector>

#include "models/kernel/oracles.h"

namespace mobisim::policies::specdec {

// Context: a sampled sequence of `context_tokens` (seeded); history: the greedy continuation of
// another sampled sequence; `steps` greedy tokens are decoded after the context.
std::vector<kernel::OracleRow> coordgen_oracles(const kernel::Model& m, int context_tokens, int steps,
                                                std::uint64_t seed);

}  // namespace mobisim::policies::specdec
