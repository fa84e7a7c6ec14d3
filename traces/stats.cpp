#include "traces/stats.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

namespace mobisim::traces {

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const std::size_t i = static_cast<std::size_t>(std::floor(pos));
  const double f = pos - static_cast<double>(i);
  return i + 1 < v.size() ? v[i] * (1 - f) + v[i + 1] * f : v[i];
}

double prefix_overlap_ratio(const std::vector<std::int32_t>& list, const std::vector<std::vector<std::int32_t>>& earlier,
                            std::size_t k) {
  const std::size_t n = std::min(k, list.size());
  std::size_t best = 0;
  for (const auto& e : earlier) {
    std::size_t m = 0;
    while (m < n && m < e.size() && e[m] == list[m]) ++m;
    best = std::max(best, m);
  }
  return k == 0 ? 0.0 : static_cast<double>(best) / static_cast<double>(k);
}

TraceStats compute_stats(const RagTrace& t, const StatsOptions& opt) {
  TraceStats s;
  s.source = t.meta.source;
  s.k = opt.k;
  s.users = t.users.size();
  s.have_embeddings = t.meta.embedding_dim > 0;
  for (const auto& u : t.users) {
    s.queries_per_user.push_back(u.queries.size());
    s.chunks_per_user.push_back(u.chunks.size());
    for (const auto& c : u.chunks) s.chunk_tokens.push_back(c.tokens);
    for (const auto& q : u.queries) {
      s.query_tokens.push_back(q.tokens);
      s.answer_tokens.push_back(q.answer_tokens);
    }
    for (std::size_t i = 1; i < u.queries.size(); ++i)
      s.gap_s.push_back(u.queries[i].arrival_s - u.queries[i - 1].arrival_s);
    for (const auto& w : u.idle_windows) {
      s.idle_s += w.end_s - w.start_s;
      if (w.charging) s.idle_charging_s += w.end_s - w.start_s;
      s.span_s = std::max(s.span_s, w.end_s);
    }
    s.idle_windows += u.idle_windows.size();

    // Retrieved lists: stored ones when long enough, else recomputed.
    std::vector<std::vector<std::int32_t>> lists(u.queries.size());
    bool need = false;
    for (const auto& q : u.queries) need = need || q.retrieved.size() < std::min(opt.k, u.chunks.size());
    if (need && !u.chunks.empty()) {
      s.retrieval_recomputed = true;
      std::vector<std::string> texts;
      std::vector<std::vector<float>> emb;
      for (const auto& c : u.chunks) {
        texts.push_back(c.text);
        emb.push_back(c.embedding);
      }
      RetrieverConfig rc = opt.retrieval;
      if (!s.have_embeddings) rc.mode = RetrievalMode::kBm25;
      Retriever r(texts, s.have_embeddings ? emb : std::vector<std::vector<float>>{}, rc);
      for (std::size_t i = 0; i < u.queries.size(); ++i)
        for (const Hit& h : r.retrieve(u.queries[i].text, u.queries[i].embedding, opt.k)) lists[i].push_back(h.chunk);
    } else {
      for (std::size_t i = 0; i < u.queries.size(); ++i) {
        const auto& r = u.queries[i].retrieved;
        lists[i].assign(r.begin(), r.begin() + static_cast<std::ptrdiff_t>(std::min(opt.k, r.size())));
      }
    }
    std::map<std::int32_t, std::int64_t> freq;
    for (std::size_t i = 0; i < lists.size(); ++i) {
      for (auto c : lists[i]) ++freq[c];
      s.prefix_overlap.push_back(
          prefix_overlap_ratio(lists[i], std::vector<std::vector<std::int32_t>>(lists.begin(), lists.begin() + i), opt.k));
      const auto& rel = u.queries[i].relevant;
      if (!rel.empty()) {
        ++s.recall_queries;
        if (std::any_of(lists[i].begin(), lists[i].end(),
                        [&](std::int32_t c) { return std::binary_search(rel.begin(), rel.end(), c); }))
          ++s.recall_hits;
      }
    }
    for (const auto& [c, n] : freq) s.chunk_retrieval_freq.push_back(n);

    if (s.have_embeddings) {
      for (std::size_t i = 0; i < u.queries.size(); ++i) {
        double best = -2;
        for (std::size_t j = 0; j < i; ++j) {
          const double c = dot(u.queries[i].embedding, u.queries[j].embedding);
          best = std::max(best, c);
          s.pairwise_similarity.push_back(c);
        }
        if (i > 0) s.top1_similarity.push_back(best);
      }
    }
  }
  return s;
}

namespace {

template <class T>
std::vector<double> as_double(const std::vector<T>& v) {
  return std::vector<double>(v.begin(), v.end());
}

double mean(const std::vector<double>& v) {
  if (v.empty()) return NAN;
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}

double frac(const std::vector<double>& v, double lo, double hi = INFINITY) {
  if (v.empty()) return NAN;
  return static_cast<double>(std::count_if(v.begin(), v.end(), [&](double x) { return x >= lo && x < hi; })) /
         static_cast<double>(v.size());
}

std::string dist_row(const std::string& name, const std::vector<double>& v, const std::string& fmt_spec = "{:.2f}") {
  auto f = [&](double x) { return std::isnan(x) ? std::string("-") : fmt::format(fmt::runtime(fmt_spec), x); };
  return fmt::format("  {:<34} {:>6} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}\n", name, v.size(), f(mean(v)),
                     f(quantile(v, 0.0)), f(quantile(v, 0.1)), f(quantile(v, 0.5)), f(quantile(v, 0.9)),
                     f(quantile(v, 1.0)));
}

std::string pct(double x) { return std::isnan(x) ? "-" : fmt::format("{:.1f}%", 100 * x); }

template <class T>
std::string json_array(const std::vector<T>& v) {
  std::string out = "[";
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i) out += ",";
    if constexpr (std::is_floating_point_v<T>)
      out += std::isfinite(v[i]) ? fmt::format("{}", v[i]) : "null";
    else
      out += fmt::format("{}", v[i]);
  }
  return out + "]";
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') o += '\\', o += static_cast<char>(c);
    else if (c < 0x20) o += fmt::format("\\u{:04x}", c);
    else o += static_cast<char>(c);
  }
  return o;
}

}  // namespace

std::string format_stats(const TraceStats& s) {
  std::string o;
  o += fmt::format("RAG trace statistics: source {}, {} users, top-k = {}{}\n", s.source, s.users, s.k,
                   s.retrieval_recomputed ? " (retrieval recomputed)" : " (stored retrieval)");
  o += fmt::format("  {:<34} {:>6} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}\n", "distribution", "n", "mean", "min", "p10",
                   "p50", "p90", "max");
  o += dist_row("queries per user", as_double(s.queries_per_user), "{:.1f}");
  o += dist_row("chunks per user", as_double(s.chunks_per_user), "{:.1f}");
  o += dist_row("chunk retrieval frequency (fig 3)", as_double(s.chunk_retrieval_freq), "{:.2f}");
  o += dist_row("prefix overlap ratio (fig 5)", s.prefix_overlap);
  o += dist_row("top-1 sim. to earlier query (fig 6)", s.top1_similarity, "{:.3f}");
  o += dist_row("pairwise query similarity (fig 2)", s.pairwise_similarity, "{:.3f}");
  o += dist_row("chunk tokens", as_double(s.chunk_tokens), "{:.0f}");
  o += dist_row("query tokens", as_double(s.query_tokens), "{:.1f}");
  o += dist_row("answer tokens", as_double(s.answer_tokens), "{:.0f}");
  std::vector<double> gap_h;
  for (double g : s.gap_s) gap_h.push_back(g / 3600.0);
  o += dist_row("inter-arrival gap [h]", gap_h, "{:.2f}");

  const auto freq = as_double(s.chunk_retrieval_freq);
  o += "\nchunk retrieval frequency histogram (retrieved chunks):\n";
  for (int f = 1; f <= 5; ++f)
    o += fmt::format("  {}{:<3} {:>6} ({})\n", f == 5 ? ">=" : "  ", f,
                     std::count_if(freq.begin(), freq.end(), [&](double x) { return f == 5 ? x >= 5 : x == f; }),
                     pct(f == 5 ? frac(freq, 5) : frac(freq, f, f + 1)));
  o += fmt::format("  retrieved more than once: {}\n", pct(frac(freq, 2)));
  o += "prefix overlap ratio histogram (queries):\n";
  for (std::size_t m = 0; m <= s.k; ++m) {
    const double r = s.k ? static_cast<double>(m) / static_cast<double>(s.k) : 0.0;
    o += fmt::format("  {:>5.2f}  {}\n", r, pct(frac(s.prefix_overlap, r - 1e-9, r + 1e-9)));
  }
  if (!s.top1_similarity.empty()) {
    o += "top-1 similarity to earlier queries:\n";
    const double edges[] = {-1, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 1.01};
    for (int i = 0; i + 1 < 8; ++i)
      o += fmt::format("  [{:>5.2f}, {:>4.2f})  {}\n", std::max(edges[i], 0.0), std::min(edges[i + 1], 1.0),
                       pct(frac(s.top1_similarity, edges[i], edges[i + 1])));
    o += fmt::format("  >= 0.80: {}   >= 0.85: {}   >= 0.90: {}\n", pct(frac(s.top1_similarity, 0.8)),
                     pct(frac(s.top1_similarity, 0.85)), pct(frac(s.top1_similarity, 0.9)));
  } else {
    o += "top-1 similarity: the trace has no embeddings\n";
  }
  if (s.recall_queries)
    o += fmt::format("recall@{} of ground-truth relevant chunks: {} of {} queries ({})\n", s.k, s.recall_hits,
                     s.recall_queries, pct(static_cast<double>(s.recall_hits) / static_cast<double>(s.recall_queries)));
  o += fmt::format("idle windows: {} ({:.1f} h idle, {:.1f} h of it charging, trace span {:.1f} h)\n", s.idle_windows,
                   s.idle_s / 3600, s.idle_charging_s / 3600, s.span_s / 3600);
  return o;
}

std::string stats_json(const TraceStats& s) {
  return fmt::format(
      "{{\"source\":\"{}\",\"k\":{},\"users\":{},\"queries_per_user\":{},\"chunks_per_user\":{},"
      "\"chunk_retrieval_freq\":{},\"prefix_overlap\":{},\"top1_similarity\":{},\"pairwise_similarity\":{},"
      "\"chunk_tokens\":{},\"query_tokens\":{},\"answer_tokens\":{},\"gap_s\":{},\"recall_queries\":{},"
      "\"recall_hits\":{}}}\n",
      json_escape(s.source), s.k, s.users, json_array(s.queries_per_user), json_array(s.chunks_per_user),
      json_array(s.chunk_retrieval_freq), json_array(s.prefix_overlap), json_array(s.top1_similarity),
      json_array(s.pairwise_similarity), json_array(s.chunk_tokens), json_array(s.query_tokens),
      json_array(s.answer_tokens), json_array(s.gap_s), s.recall_queries, s.recall_hits);
}

}  // namespace mobisim::traces
