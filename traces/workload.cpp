#include "traces/workload.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "sim/error.h"
#include "traces/text.h"

namespace mobisim::traces {

namespace {
constexpr double kDay_s = 86400.0;
}

std::string ArrivalConfig::describe() const {
  return fmt::format(
      "sparse-active-time-exponential(mean_gap_s={}, active_h=[{},{}), charging_h=[{},{}) overnight, "
      "idle_grace_s={}, min_idle_s={})",
      mean_gap_s, active_start_h, active_end_h, charge_start_h, charge_end_h, idle_grace_s, min_idle_s);
}

void ArrivalConfig::validate() const {
  auto bad = [](const std::string& m) { throw ConfigError("arrival model: " + m); };
  if (!(mean_gap_s > 0)) bad(fmt::format("mean_gap_s must be > 0, got {}", mean_gap_s));
  if (!(0 <= active_start_h && active_start_h < active_end_h && active_end_h <= 24))
    bad(fmt::format("need 0 <= active_start_h < active_end_h <= 24, got {} and {}", active_start_h, active_end_h));
  if (!(charge_start_h >= active_end_h && charge_start_h <= 24))
    bad(fmt::format("charge_start_h ({}) must lie in [active_end_h ({}), 24]", charge_start_h, active_end_h));
  if (!(charge_end_h >= 0 && charge_end_h <= active_start_h))
    bad(fmt::format("charge_end_h ({}) must lie in [0, active_start_h ({})]", charge_end_h, active_start_h));
  if (!(idle_grace_s >= 0) || !(min_idle_s >= 0)) bad("idle_grace_s and min_idle_s must be >= 0");
}

ParamSchema arrival_schema() {
  ParamSchema s;
  ArrivalConfig d;
  s.real("mean_gap_s", d.mean_gap_s, "mean gap between a user's queries, counted in active (daytime) seconds")
      .range(0, 86400).positive().with_unit("s");  // with <= 10^4 queries, arrivals stay within the clock's range
  s.real("active_start_h", d.active_start_h, "hour of day the user starts using the phone").range(0, 24)
      .with_unit("h");
  s.real("active_end_h", d.active_end_h, "hour of day the user stops issuing queries").range(0, 24).with_unit("h");
  s.real("charge_start_h", d.charge_start_h, "hour of day the phone goes on the charger (idle, charging)")
      .range(0, 24).with_unit("h");
  s.real("charge_end_h", d.charge_end_h, "hour of the next day the phone leaves the charger").range(0, 24)
      .with_unit("h");
  s.real("idle_grace_s", d.idle_grace_s, "time after a query before the phone counts as idle").non_negative()
      .with_unit("s");
  s.real("min_idle_s", d.min_idle_s, "shortest non-charging idle window recorded").non_negative().with_unit("s");
  return s;
}

ArrivalConfig arrival_from_params(const Params& p) {
  ArrivalConfig c;
  c.mean_gap_s = p.real("mean_gap_s");
  c.active_start_h = p.real("active_start_h");
  c.active_end_h = p.real("active_end_h");
  c.charge_start_h = p.real("charge_start_h");
  c.charge_end_h = p.real("charge_end_h");
  c.idle_grace_s = p.real("idle_grace_s");
  c.min_idle_s = p.real("min_idle_s");
  try {
    c.validate();
  } catch (const ConfigError& e) {
    p.fail("charge_start_h", e.what());
  }
  return c;
}

std::vector<double> sample_arrivals(std::size_t n, const ArrivalConfig& cfg, sim::Rng& rng) {
  cfg.validate();
  const double active_s = (cfg.active_end_h - cfg.active_start_h) * 3600.0;
  std::vector<double> out;
  out.reserve(n);
  double tau = 0;  // cumulative active time
  for (std::size_t i = 0; i < n; ++i) {
    tau += rng.exponential(1.0 / cfg.mean_gap_s);
    const double day = std::floor(tau / active_s);
    out.push_back(day * kDay_s + cfg.active_start_h * 3600.0 + (tau - day * active_s));
  }
  return out;
}

std::vector<IdleWindow> idle_windows(const std::vector<double>& arrivals, const ArrivalConfig& cfg) {
  std::vector<IdleWindow> out;
  const double last = arrivals.empty() ? 0.0 : arrivals.back();
  const double last_day = std::floor(last / kDay_s);
  // The charging window that starts on the last query's day closes the trace.
  const double end = (last_day + 1) * kDay_s + cfg.charge_end_h * 3600.0;
  auto emit = [&](double s, double e) {
    // Split [s, e) at charging windows C_d = [d*day + charge_start, (d+1)*day + charge_end).
    for (double d = std::floor(s / kDay_s) - 1; d <= std::floor(e / kDay_s); ++d) {
      const double cs = d * kDay_s + cfg.charge_start_h * 3600.0, ce = (d + 1) * kDay_s + cfg.charge_end_h * 3600.0;
      const double a = std::max(s, cs), b = std::min(e, ce);
      if (a >= b) continue;
      if (a - s >= cfg.min_idle_s && a > s) out.push_back({s, a, false});
      out.push_back({a, b, true});
      s = b;
    }
    if (e - s >= cfg.min_idle_s && e > s) out.push_back({s, e, false});
  };
  double prev = -cfg.idle_grace_s;  // the trace starts idle at 00:00
  for (double a : arrivals) {
    const double s = prev + cfg.idle_grace_s;
    if (a > s) emit(s, a);
    prev = std::max(prev, a);
  }
  if (end > prev + cfg.idle_grace_s) emit(prev + cfg.idle_grace_s, end);
  return out;
}

std::unique_ptr<models::Tokenizer> make_tokenizer(const std::string& path) {
  if (path.empty()) return std::make_unique<models::EstimateTokenizer>();
  return models::load_sentencepiece(path);
}

std::vector<WordChunk> chunk_by_words(const std::vector<std::string>& units, std::size_t chunk_words) {
  if (chunk_words == 0) throw ConfigError("chunk_words must be > 0");
  std::vector<WordChunk> out;
  std::vector<std::string> cur;
  std::size_t first = 0, last = 0;
  for (std::size_t u = 0; u < units.size(); ++u) {
    for (auto& w : split_whitespace(units[u])) {
      if (cur.empty()) first = u;
      last = u;
      cur.push_back(std::move(w));
      if (cur.size() == chunk_words) {
        out.push_back({join(cur, " "), first, last});
        cur.clear();
      }
    }
  }
  if (!cur.empty()) out.push_back({join(cur, " "), first, last});
  return out;
}

void enrich_user(UserTrace& user, const EnrichOptions& opt) {
  if (!opt.tokenizer) throw Error("internal: enrich_user without a tokenizer");
  for (auto& c : user.chunks) c.tokens = static_cast<std::int32_t>(opt.tokenizer->count(c.text));
  for (auto& q : user.queries) {
    q.tokens = static_cast<std::int32_t>(opt.tokenizer->count(q.text));
    q.answer_tokens = static_cast<std::int32_t>(opt.tokenizer->count(q.answer_text));
  }
  if (!opt.embed && opt.retrieve_k == 0) return;
  std::vector<std::string> texts;
  texts.reserve(user.chunks.size());
  for (const auto& c : user.chunks) texts.push_back(c.text);
  std::vector<std::vector<float>> external;
  if (!opt.embed)  // keep whatever embeddings the chunks carry (possibly none: BM25-only)
    for (const auto& c : user.chunks) external.push_back(c.embedding);
  RetrieverConfig rc = opt.retrieval;
  if (!opt.embed && (external.empty() || external.front().empty())) {
    rc.mode = RetrievalMode::kBm25;
    external.clear();
  }
  Retriever r(texts, external, rc, opt.embedder);
  if (opt.embed) {
    for (std::size_t i = 0; i < user.chunks.size(); ++i) user.chunks[i].embedding = r.chunk_embeddings()[i];
    for (auto& q : user.queries) q.embedding = r.embed(q.text);
  }
  if (opt.retrieve_k > 0) {
    for (auto& q : user.queries) {
      q.retrieved.clear();
      const std::vector<float> none;
      for (const Hit& h : r.retrieve(q.text, rc.mode == RetrievalMode::kBm25 ? none : q.embedding, opt.retrieve_k))
        q.retrieved.push_back(h.chunk);
    }
  }
}

void describe_enrichment(RagTraceMeta& meta, const EnrichOptions& opt) {
  meta.tokenizer = opt.tokenizer ? opt.tokenizer->name() : "";
  meta.tokens_exact = opt.tokenizer && opt.tokenizer->exact();
  if (opt.embed) {
    meta.embedder = opt.embedder.describe();
    meta.embedding_dim = opt.embedder.dim;
  }
  meta.retrieved_k = static_cast<std::int32_t>(opt.retrieve_k);
  meta.retrieval = opt.retrieve_k > 0 ? opt.retrieval.describe() : "";
}

}  // namespace mobisim::traces
