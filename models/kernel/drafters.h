#pragma once
// Speculative decoding: drafters that propose continuations without running the
// model (prompt lookup / n-gram, suffix automaton, random, replay), batched
// verification of a draft sequence or tree in one forward pass, and the greedy
// speculative loop. Under greedy acceptance the output equals plain greedy
// decoding token for token, whatever the drafter proposes; drafters only change
// how many tokens each verification step accepts.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "models/kernel/transformer.h"
#include "sim/rng.h"

namespace mobisim::kernel {

// A draft of tokens that continue the pending token. parents[i] is the index of
// the draft token that token i follows, -1 for the pending token itself; a
// chain has parents {-1, 0, 1, ...}. Parents precede their children.
struct DraftTree {
  std::vector<int> tokens;
  std::vector<int> parents;
  static DraftTree chain(std::vector<int> tokens);
  int size() const { return static_cast<int>(tokens.size()); }
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  // `context` is every token so far, ending with the pending token (whose
  // continuation is drafted). At most `max_tokens` tokens.
  virtual DraftTree propose(std::span<const int> context, int max_tokens) = 0;
  virtual std::string name() const = 0;
};

// Prompt lookup decoding (PLD): finds the most recent earlier occurrence of the
// context's last n tokens (n from max_ngram down to min_ngram) and proposes what followed it.
class PromptLookupDrafter : public Drafter {
 public:
  explicit PromptLookupDrafter(int max_ngram = 3, int min_ngram = 1) : max_n_(max_ngram), min_n_(min_ngram) {}
  DraftTree propose(std::span<const int> context, int max_tokens) override;
  std::string name() const override { return "prompt-lookup"; }

 private:
  int max_n_, min_n_;
};

// Suffix automaton over the tokens seen so far (SAM drafting, as in CoordGen):
// the longest suffix of the context that occurred before is found through the
// suffix link of the automaton's last state in O(1); the tokens that followed
// its most recent earlier occurrence are proposed. The automaton is extended
// incrementally with the tokens the context gained since the last call.
class SuffixAutomatonDrafter : public Drafter {
 public:
  DraftTree propose(std::span<const int> context, int max_tokens) override;
  std::string name() const override { return "suffix-automaton"; }
  // Length of the longest earlier-occurring suffix found by the last propose().
  int last_match_length() const { return last_match_; }
  // Extends the automaton with what `context` gained since the last call (restarting if it does not
  // continue what was seen), without drafting: propose() does this first.
  void observe(std::span<const int> context);
  // Length of the longest prefix of `pattern` that occurs anywhere in the tokens observed so far.
  int longest_occurring_prefix(std::span<const int> pattern) const;

 private:
  struct State {
    // last_end: latest end position of an occurrence; prev_end: the one before it.
    int len = 0, link = -1, last_end = -1, prev_end = -1;
    std::vector<std::pair<int, int>> next;  // (token, state), small and sorted by token
  };
  int find(int s, int tok) const;
  void extend(int tok, int end_pos);
  std::vector<State> st_;
  std::vector<int> seen_;  // tokens already in the automaton
  int last_ = 0;
  int last_match_ = 0;
};

// Uniformly random tokens, as a chain or as a tree with `branching` children per node.
class RandomDrafter : public Drafter {
 public:
  RandomDrafter(int vocab, std::uint64_t seed, int branching = 1) : vocab_(vocab), branching_(branching), rng_(seed) {}
  DraftTree propose(std::span<const int> context, int max_tokens) override;
  std::string name() const override { return branching_ > 1 ? "random-tree" : "random"; }

 private:
  int vocab_, branching_;
  sim::Rng rng_;
};

// Proposes the continuation of a known reference sequence (e.g. a previous
// greedy run), corrupting each token with probability `error_rate`; as a tree
// it adds one random sibling per level. Exercises multi-token acceptance.
class ReplayDrafter : public Drafter {
 public:
  ReplayDrafter(std::vector<int> reference, int vocab, double error_rate, std::uint64_t seed, bool tree = false)
      : ref_(std::move(reference)), vocab_(vocab), err_(error_rate), tree_(tree), rng_(seed) {}
  DraftTree propose(std::span<const int> context, int max_tokens) override;
  std::string name() const override { return tree_ ? "replay-tree" : "replay"; }

 private:
  std::vector<int> ref_;
  int vocab_;
  double err_;
  bool tree_;
  sim::Rng rng_;
};

struct VerifyResult {
  std::vector<int> accepted;  // draft tokens accepted (the greedy path through the tree)
  int bonus = -1;             // the model's next token after the accepted ones (the new pending token)
  int fed = 0;                // tokens run in the verification pass (pending + draft)
  std::int64_t draft_pairs = 0;  // (draft query, draft key) pairs the tree mask allowed
  // The model's argmax after every row (row 0 = pending token, row i + 1 = draft token i), on or
  // off the accepted path: what CoordGen's draft reuse (eq. 3) compares rejected tokens with.
  std::vector<int> predicted;
};

// Runs the pending token and the draft in one batched pass after the cache's
// positions. Afterwards the cache holds the pending token and the accepted
// draft tokens at consecutive positions, exactly as plain decoding would have.
VerifyResult verify_draft(const Model& m, KVCache& cache, RunState& st, int pending, const DraftTree& draft,
                          FlopCounter* flops = nullptr);

struct SpeculativeStats {
  int verify_steps = 0;
  int accepted_tokens = 0;  // draft tokens accepted over all steps
  double accepted_per_step() const { return verify_steps ? double(accepted_tokens) / verify_steps : 0.0; }
};

// Greedy decoding of `steps` tokens after `prompt` with draft-and-verify; the
// result (prompt included) equals generate_greedy's.
std::vector<int> speculative_greedy(const Model& m, std::span<const int> prompt, int steps, Drafter& drafter,
                                    int max_draft, SpeculativeStats* stats = nullptr);

}  // namespace mobisim::kernel
