#include "policies/rag/query_predictor.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <set>
#include <unordered_map>

#include "sim/error.h"
#include "sim/registry.h"
#include "traces/text.h"

namespace mobisim::policies {

// ---------------------------------------------------------------------------
// Appendix B.3 prompts.
// ---------------------------------------------------------------------------
std::string abstract_prompt(const std::vector<std::string>& chunk_texts) {
  return "Please summarize the following text into a sentence that captures the key events and key concepts: " +
         traces::join(chunk_texts, "\n") +
         ". Focus only on the essential core content and main ideas. Do NOT include any other text or explanations.";
}

std::string knowledge_prediction_prompt(const std::string& type, const std::string& abstract, int n) {
  return fmt::format(
      "You are a smartphone AI assistant that helps users by checking their {0} to answer questions. Here is some "
      "abstract of the content: {1}.\n\nThink about what questions users are most likely to ask regarding this "
      "content in their daily life.\n\nThe user might ask two kind of questions about their {0}, such as:\n\n1. "
      "General questions. Such as \"What is the main topic of the {0} recorded on XXX?\".\n2. Detailed questions. "
      "Such as \"What activities did the user mention doing on XXX day?\".\n\nNow guess {2} questions that users "
      "might ask. Provide them in this format: '1. ...?; 2. ...?; 3. ...?' without any other text or explanations.",
      type, abstract, n);
}

std::string history_prediction_prompt(const std::string& type, const std::vector<std::string>& history, int n) {
  return fmt::format(
      "You are a smartphone AI assistant that helps users by checking their {0} to answer questions. Here is their "
      "recent query history: {1}.\n\nGenerate another {2} questions users might ask. Carefully analyze and mirror "
      "the language style, tone, formality level, and interests shown in the examples.\n\nPlease provide them in "
      "this format: '1. ...?; 2. ...?; 3. ...?' Do not repeat the examples. Do not include any other text or "
      "explanations, just the questions.",
      type, traces::join(history, " "), n);
}

std::string prediction_output(const std::vector<std::string>& questions) {
  std::string out;
  for (std::size_t i = 0; i < questions.size(); ++i) out += fmt::format("{}{}. {}", i ? "; " : "", i + 1, questions[i]);
  return out;
}

// ---------------------------------------------------------------------------
// Knowledge abstract.
// ---------------------------------------------------------------------------
namespace {

const std::set<std::string>& function_words() {
  static const std::set<std::string> w = {
      "about", "after", "again", "also", "because", "been", "before", "being", "could", "does", "doing", "done",
      "from", "have", "having", "here", "into", "just", "know", "like", "mean", "more", "much", "okay", "only",
      "other", "really", "right", "said", "same", "should", "some", "something", "sure", "than", "that", "their",
      "them", "then", "there", "these", "they", "thing", "things", "think", "this", "those", "though", "through",
      "very", "want", "well", "were", "what", "when", "where", "which", "while", "will", "with", "would", "yeah",
      "your", "gonna", "going", "actually", "maybe", "kind", "sort", "good", "look", "make", "need", "yes", "let",
      "what's", "that's", "it's", "there's"};
  return w;
}

bool letters_only(const std::string& w) {
  return std::all_of(w.begin(), w.end(), [](unsigned char c) { return std::isalpha(c) != 0; });
}

std::string lower_first(std::string s) {
  if (s.size() > 1 && std::isupper(static_cast<unsigned char>(s[0])) && !std::isupper(static_cast<unsigned char>(s[1])))
    s[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(s[0])));
  return s;
}

std::string strip_end(std::string s) {
  while (!s.empty() && (s.back() == '.' || s.back() == '?' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace

namespace {
traces::TextWords words_of_chunks(const traces::UserTrace& user) {
  std::vector<std::string> texts;
  texts.reserve(user.chunks.size());
  for (const auto& c : user.chunks) texts.push_back(c.text);
  return traces::TextWords::of(texts);
}
}  // namespace

PhraseIndex::PhraseIndex(const traces::UserTrace& user) : PhraseIndex(user, words_of_chunks(user)) {}

PhraseIndex::PhraseIndex(const traces::UserTrace& user, const traces::TextWords& chunk_words) {
  if (chunk_words.texts.size() != user.chunks.size())
    throw Error(fmt::format("phrase index: {} tokenized chunks for {} chunks", chunk_words.texts.size(),
                            user.chunks.size()));
  // Candidate ids in order of first appearance (text order); kUnassigned: not seen yet, kExcluded:
  // not a candidate (too short, not letters only, a function word). The filters run once per word.
  constexpr std::uint32_t kUnassigned = static_cast<std::uint32_t>(-1), kExcluded = kUnassigned - 1;
  std::vector<std::uint32_t> candidate(chunk_words.vocab.size(), kUnassigned);
  std::vector<std::size_t> df;
  std::vector<std::uint32_t> uniq;
  for (const auto& words : chunk_words.texts) {
    std::vector<std::uint32_t> ids;
    for (std::uint32_t v : words) {
      std::uint32_t& c = candidate[v];
      if (c == kUnassigned) {
        const std::string& w = chunk_words.vocab[v];
        if (w.size() >= 4 && letters_only(w) && !function_words().count(w)) {
          c = static_cast<std::uint32_t>(vocab_.size());
          vocab_.push_back(w);
          df.push_back(0);
        } else {
          c = kExcluded;
        }
      }
      if (c != kExcluded) ids.push_back(c);
    }
    uniq = ids;
    std::sort(uniq.begin(), uniq.end());
    uniq.erase(std::unique(uniq.begin(), uniq.end()), uniq.end());
    for (auto id : uniq) ++df[id];
    chunk_words_.push_back(std::move(ids));
  }
  const double N = static_cast<double>(user.chunks.size());
  idf_.reserve(df.size());
  for (std::size_t d : df) idf_.push_back(std::log((1.0 + N) / (1.0 + static_cast<double>(d))) + 1.0);
}

std::vector<std::string> PhraseIndex::key_phrases(const std::vector<std::int32_t>& chunks, std::size_t n) const {
  // Per word: (count, first position). Positions count every occurrence, so no two words share a
  // first position and (score, first position) orders the words completely.
  constexpr auto kUnseen = static_cast<std::uint32_t>(-1);
  std::vector<std::uint32_t> slot(vocab_.size(), kUnseen);
  std::vector<std::uint32_t> word;
  std::vector<std::pair<std::size_t, std::size_t>> tf;
  std::size_t pos = 0;
  for (auto id : chunks)
    for (std::uint32_t w : chunk_words_.at(static_cast<std::size_t>(id))) {
      if (slot[w] == kUnseen) {
        slot[w] = static_cast<std::uint32_t>(tf.size());
        tf.emplace_back(0, pos);
        word.push_back(w);
      }
      ++tf[slot[w]].first;
      ++pos;
    }
  std::vector<std::tuple<double, std::size_t, std::uint32_t>> scored;
  scored.reserve(tf.size());
  for (std::size_t i = 0; i < tf.size(); ++i)
    scored.emplace_back(-(1.0 + std::log(static_cast<double>(tf[i].first))) * idf_[word[i]], tf[i].second, word[i]);
  std::sort(scored.begin(), scored.end());
  std::vector<std::string> out;
  for (std::size_t i = 0; i < std::min(n, scored.size()); ++i) out.push_back(vocab_[std::get<2>(scored[i])]);
  return out;
}

std::vector<std::string> KnowledgeAbstract::items() const {
  std::vector<std::string> out;
  for (const auto& b : batches) out.insert(out.end(), b.items.begin(), b.items.end());
  return out;
}

std::string KnowledgeAbstract::text() const { return traces::join(items(), "; "); }

KnowledgeAbstract build_abstract(const traces::UserTrace& user, const PhraseIndex& phrases, const std::string& source,
                                 std::size_t batch_chunks) {
  std::vector<std::int32_t> all(user.chunks.size());
  for (std::size_t c = 0; c < all.size(); ++c) all[c] = static_cast<std::int32_t>(c);
  return build_abstract(user, phrases, source, batch_chunks, all);
}

KnowledgeAbstract build_abstract(const traces::UserTrace& user, const PhraseIndex& phrases, const std::string& source,
                                 std::size_t batch_chunks, const std::vector<std::int32_t>& chunk_ids) {
  KnowledgeAbstract a;
  const std::size_t n = chunk_ids.size();
  batch_chunks = std::max<std::size_t>(1, batch_chunks);
  const std::size_t n_batches = (n + batch_chunks - 1) / batch_chunks;
  const bool topics = source == "topics" && !user.topics.empty();
  for (std::size_t b = 0; b < n_batches; ++b) {
    AbstractBatch batch;
    for (std::size_t c = b * batch_chunks; c < std::min(n, (b + 1) * batch_chunks); ++c)
      batch.chunks.push_back(chunk_ids[c]);
    if (topics) {
      // The meeting's topics, spread over the batches in order (topic t summarised from batch t*B/T).
      for (std::size_t t = 0; t < user.topics.size(); ++t)
        if (t * n_batches / user.topics.size() == b) batch.items.push_back(lower_first(user.topics[t]));
    } else {
      const auto kp = phrases.key_phrases(batch.chunks, 2);
      if (!kp.empty()) batch.items.push_back(traces::join(kp, " "));
    }
    a.batches.push_back(std::move(batch));
  }
  return a;
}

// ---------------------------------------------------------------------------
// Predictors.
// ---------------------------------------------------------------------------
namespace {

std::string general_q(const std::string& type, const std::string& item) {
  return item.empty() ? fmt::format("What is the main topic of the {}?", type)
                      : fmt::format("Summarize the discussion about {}.", item);
}
std::string detailed_q(const std::string& item) { return fmt::format("What did the group discuss about {}?", item); }

// The phrasing frame of a question: its words up to and including the first preposition that
// introduces its subject ("What did the Marketing think of", "Summarize the discussion about").
std::string frame_of(const std::string& q) {
  static const std::set<std::string> preps = {"about", "of", "on", "regarding", "for"};
  const auto raw = traces::split_whitespace(q);
  for (std::size_t i = 1; i < raw.size(); ++i) {
    const auto w = traces::words(raw[i]);
    if (w.size() == 1 && preps.count(w[0])) return traces::join(raw, " ", 0, i + 1);
  }
  return "";
}

class GeneratorPredictor : public QueryPredictor {
 public:
  explicit GeneratorPredictor(const Params& p) : repeat_threshold_(p.real("repeat_threshold")) {}
  static ParamSchema schema() {
    ParamSchema s;
    s.real("repeat_threshold", 0.9,
           "history-based: skip a fill-in whose question would be this similar to the source query (B.3: 'Do not "
           "repeat the examples')")
        .range(0, 1);
    return s;
  }

  std::vector<std::string> knowledge_based(const PredictionContext& ctx, int n) override {
    // Candidates in a fixed order: the general "main topic" question, then per abstract item a
    // detailed and a general question. Each round takes the next n.
    std::vector<std::string> cands{general_q(ctx.knowledge_type, "")};
    for (const auto& item : ctx.abstract) {
      cands.push_back(detailed_q(item));
      cands.push_back(general_q(ctx.knowledge_type, item));
    }
    std::vector<std::string> out;
    while (static_cast<int>(out.size()) < n && knowledge_cursor_ < cands.size()) {
      const auto& q = cands[knowledge_cursor_++];
      if (emitted_.insert(q).second) out.push_back(q);
    }
    return out;
  }

  std::vector<std::string> history_based(const PredictionContext& ctx, int n) override {
    std::vector<std::string> out;
    // Most recent query first; each contributes its phrasing frame, filled with the abstract items
    // and key phrases of the chunks it retrieved, most similar to it first (at most two each).
    for (std::size_t h = ctx.history.size(); h-- > 0 && static_cast<int>(out.size()) < n;) {
      HistoryCandidates& e = candidates_of(ctx, h);
      int from_this = 0;
      for (std::size_t i = 0; i < e.questions.size(); ++i) {
        if (static_cast<int>(out.size()) >= n || from_this >= 2) break;
        if (!passes_repeat_check(ctx, e, i)) continue;
        if (!emitted_.insert(e.questions[i]).second) continue;
        out.push_back(e.questions[i]);
        ++from_this;
      }
    }
    return out;
  }

  std::vector<std::string> raw_context(const PredictionContext& ctx, int n) override {
    std::vector<std::string> out;
    if (!ctx.phrases) return out;
    const auto kp = ctx.phrases->key_phrases(ctx.raw_chunks, static_cast<std::size_t>(2 * n));
    for (std::size_t i = 0; i < kp.size() && static_cast<int>(out.size()) < n; i += 2) {
      const std::string item = i + 1 < kp.size() ? kp[i] + " " + kp[i + 1] : kp[i];
      const std::string q = (out.size() % 2 == 0) ? detailed_q(item) : general_q(ctx.knowledge_type, item);
      if (emitted_.insert(q).second) out.push_back(q);
    }
    return out;
  }

 private:
  // A history query's candidate questions, most similar fill first. They depend only on the query,
  // the chunks it retrieved and the abstract, which only grows by appending (so its size and last
  // item identify it): a query stays in the history window for several rounds, and its candidates
  // (and their repeat checks, done when first needed) are worked out once, not every round.
  struct HistoryCandidates {
    std::vector<std::string> questions;
    std::vector<signed char> repeat;  // per question: -1 not yet checked, 1 too similar to the query, 0 not
    std::string query;
  };
  HistoryCandidates& candidates_of(const PredictionContext& ctx, std::size_t h) {
    const std::string& q = ctx.history[h];
    const std::vector<std::int32_t>* chunks = h < ctx.history_chunks.size() ? &ctx.history_chunks[h] : nullptr;
    std::string key = q;
    key.push_back('\0');
    if (chunks)
      for (std::int32_t c : *chunks) key.append(std::to_string(c)).push_back(',');
    key.push_back('\0');
    key.append(std::to_string(ctx.abstract.size()));
    if (!ctx.abstract.empty()) key.append(ctx.abstract.back());
    // Entries of queries that left the window are never asked for again: a pure memo, so dropping
    // it all now and then (keeping memory to a few windows) changes no result.
    if (history_candidates_.size() > 4 * (ctx.history.size() + 1)) history_candidates_.clear();
    auto [it, fresh] = history_candidates_.try_emplace(std::move(key));
    if (fresh) it->second = make_candidates(ctx, q, chunks);
    return it->second;
  }
  HistoryCandidates make_candidates(const PredictionContext& ctx, const std::string& q,
                                    const std::vector<std::int32_t>* chunks) const {
    HistoryCandidates e;
    e.query = q;
    const std::string frame = frame_of(q);
    if (frame.empty()) return e;
    std::vector<std::string> fills = ctx.abstract;
    if (chunks && ctx.phrases) {
      const auto kp = ctx.phrases->key_phrases(*chunks, 2);
      if (!kp.empty()) fills.push_back(traces::join(kp, " "));
    }
    std::vector<std::pair<double, std::size_t>> ranked;
    const std::vector<double> sims =
        ctx.similarity && ctx.similarities ? ctx.similarities(q, fills) : std::vector<double>{};
    for (std::size_t i = 0; i < fills.size(); ++i)
      ranked.emplace_back(!ctx.similarity ? 0.0 : sims.empty() ? -ctx.similarity(q, fills[i]) : -sims.at(i), i);
    std::stable_sort(ranked.begin(), ranked.end());
    const bool statement = traces::words(frame).front() == "summarize";
    for (const auto& [neg, i] : ranked) e.questions.push_back(frame + " " + strip_end(fills[i]) + (statement ? "." : "?"));
    e.repeat.assign(e.questions.size(), -1);
    return e;
  }
  // B.3's "Do not repeat the examples": a fill-in this similar to its source query is skipped.
  bool passes_repeat_check(const PredictionContext& ctx, HistoryCandidates& e, std::size_t i) const {
    if (!ctx.similarity) return true;
    if (e.repeat[i] < 0) e.repeat[i] = ctx.similarity(e.questions[i], e.query) >= repeat_threshold_ ? 1 : 0;
    return e.repeat[i] == 0;
  }

  double repeat_threshold_;
  std::size_t knowledge_cursor_ = 0;
  std::set<std::string> emitted_;
  std::unordered_map<std::string, HistoryCandidates> history_candidates_;
};

// Predictions produced offline by a real LLM with the B.3 prompts:
//   users:
//     "val/ES2006a":                # user id as in the trace
//       knowledge: ["q1?", ...]     # consumed n per knowledge-based round
//       history:   ["q?", ...]      # consumed n per history-based round
//       raw:       ["q?", ...]      # consumed n per sleep-time round
// A user absent from the file gets no predictions.
class FilePredictor : public QueryPredictor {
 public:
  explicit FilePredictor(const Params& p) : path_(p.text("path")) {
    root_ = load_yaml_file(path_);
    if (!root_["users"] || !root_["users"].IsMap())
      throw ConfigError(fmt::format("{}: predictions file must have a 'users:' mapping", path_));
  }
  static ParamSchema schema() {
    ParamSchema s;
    s.text("path", std::nullopt, "YAML file of offline LLM predictions (format in query_predictor.cpp)").input_path();
    return s;
  }
  std::vector<std::string> knowledge_based(const PredictionContext& c, int n) override { return take(c, "knowledge", n); }
  std::vector<std::string> history_based(const PredictionContext& c, int n) override { return take(c, "history", n); }
  std::vector<std::string> raw_context(const PredictionContext& c, int n) override { return take(c, "raw", n); }

 private:
  std::vector<std::string> take(const PredictionContext& c, const std::string& kind, int n) {
    std::vector<std::string> out;
    if (!c.user) return out;
    const YAML::Node u = root_["users"][c.user->user_id];
    if (!u || !u[kind]) return out;
    const YAML::Node list = u[kind];
    std::size_t& cur = cursor_[kind];
    while (static_cast<int>(out.size()) < n && cur < list.size()) out.push_back(list[cur++].as<std::string>());
    return out;
  }
  std::string path_;
  YAML::Node root_;
  std::map<std::string, std::size_t> cursor_;
};

// UPPER BOUND: "predicts" exactly the user's next real queries. Reads the future; label results as oracle.
class OraclePredictor : public QueryPredictor {
 public:
  explicit OraclePredictor(const Params&) {}
  static ParamSchema schema() { return {}; }
  bool is_oracle() const override { return true; }
  std::vector<std::string> knowledge_based(const PredictionContext& c, int n) override { return next(c, n); }
  std::vector<std::string> history_based(const PredictionContext& c, int n) override { return next(c, n); }
  std::vector<std::string> raw_context(const PredictionContext& c, int n) override { return next(c, n); }

 private:
  std::vector<std::string> next(const PredictionContext& c, int n) {
    std::vector<std::string> out;
    if (!c.user) return out;
    std::size_t i = std::max<std::size_t>(static_cast<std::size_t>(c.queries_served), cursor_);
    for (; static_cast<int>(out.size()) < n && i < c.user->queries.size(); ++i) out.push_back(c.user->queries[i].text);
    cursor_ = i;
    return out;
  }
  std::size_t cursor_ = 0;
};

}  // namespace

std::unique_ptr<QueryPredictor> make_predictor(const YAML::Node& node, const ConfigSource& source) {
  return Registry<QueryPredictor>::instance().create(node, source, "generator");
}

MOBISIM_REGISTER(QueryPredictor, GeneratorPredictor, "generator",
                 "Deterministic B.3-style questions from the knowledge abstract and the recent queries' phrasing.")
MOBISIM_REGISTER(QueryPredictor, FilePredictor, "file",
                 "Questions produced offline by a real LLM with the B.3 prompts, read from a YAML file.")
MOBISIM_REGISTER(QueryPredictor, OraclePredictor, "oracle",
                 "UPPER BOUND ONLY: predicts the user's next real queries (reads the future).")

}  // namespace mobisim::policies
