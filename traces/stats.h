#pragma once
// Workload statistics of a RAG trace, the quantities PerCache measures in its
// motivation (section 2.2-2.3):
//  * chunk retrieval frequency (figure 3): with top-k retrieval (k = 2 as in the
//    paper), how often each retrieved chunk of a user is retrieved;
//  * prefix overlap ratio (figure 5): queries processed in arrival order with
//    reactive caching; a query's ratio is the length of the longest prefix of
//    its top-k list that is also a prefix of some earlier query's list (a path
//    in a RAGCache-style prefix tree), divided by k. The first query scores 0;
//  * top-1 similarity to earlier queries (figure 6): for every query but a
//    user's first, the largest embedding cosine to any earlier query of the
//    same user; plus all pairwise similarities (figure 2);
//  * queries per user, token lengths, arrival gaps, idle windows, and recall@k
//    of the ground-truth relevant chunks where the trace has them.
#include <cstdint>
#include <string>
#include <vector>

#include "traces/rag_trace.h"
#include "traces/retrieval.h"

namespace mobisim::traces {

struct StatsOptions {
  std::size_t k = 2;  // PerCache figures 3 and 5 use top-2
  RetrieverConfig retrieval;  // used when the trace's stored lists are shorter than k
};

struct TraceStats {
  std::string source;
  std::size_t k = 2;
  std::size_t users = 0;
  std::vector<std::size_t> queries_per_user, chunks_per_user;
  std::vector<std::int64_t> chunk_retrieval_freq;   // one entry per (user, chunk retrieved >= once)
  std::vector<double> prefix_overlap;               // one per query
  std::vector<double> top1_similarity;              // one per query except each user's first
  std::vector<double> pairwise_similarity;          // every same-user query pair
  std::vector<std::int64_t> chunk_tokens, query_tokens, answer_tokens;
  std::vector<double> gap_s;                        // consecutive same-user arrival gaps
  double idle_s = 0, idle_charging_s = 0, span_s = 0;
  std::size_t idle_windows = 0;
  std::size_t recall_queries = 0, recall_hits = 0;  // queries with relevant chunks / hit in top-k
  bool have_embeddings = false;
  bool retrieval_recomputed = false;
};

TraceStats compute_stats(const RagTrace& trace, const StatsOptions& opt = {});
// The human-readable table printed by `mobisim trace stats`.
std::string format_stats(const TraceStats& s);
// The same data (with raw per-item arrays) as JSON, read by plots/trace_stats.py.
std::string stats_json(const TraceStats& s);

double quantile(std::vector<double> v, double q);  // linear interpolation; NaN when empty
double prefix_overlap_ratio(const std::vector<std::int32_t>& list,
                            const std::vector<std::vector<std::int32_t>>& earlier, std::size_t k);

}  // namespace mobisim::traces
