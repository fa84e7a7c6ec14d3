#include "policies/rag/replay.h"

#include "traces/metrics.h"

namespace mobisim::policies {

sim::Task<void> replay_user(RagPolicy& policy, RagPipeline& pipe, std::vector<QueryRecord>& out) {
  sim::Simulator& sim = pipe.sim();
  devices::Device& device = pipe.device();
  const traces::UserTrace& user = pipe.user();
  policy.begin_user(pipe);
  for (std::size_t i = 0; i < user.queries.size(); ++i) {
    const traces::Query& q = user.queries[i];
    const sim::Time arrival = sim::from_seconds(q.arrival_s);
    if (sim.now() < arrival) {
      co_await policy.idle(pipe, arrival);
      if (sim.now() < arrival) co_await sim.timeout(arrival - sim.now());
    }
    QueryRecord rec;
    // Background work of the idle time just ended belongs to this query's row.
    QueryRecord& bg = pipe.background();
    rec.bg_s = bg.embed_s + bg.qa_match_s + bg.retrieval_s + bg.kv_match_s + bg.load_s + bg.prefill_s + bg.decode_s;
    rec.bg_flops = bg.flops;
    rec.bg_energy_j = bg.active_energy_j;
    rec.bg_jobs = pipe.background_jobs();
    bg = QueryRecord{};
    pipe.background_jobs() = 0;
    rec.user = user.user_id;
    rec.query_index = static_cast<std::int64_t>(i);
    rec.arrival_s = q.arrival_s;
    rec.start_s = sim::to_seconds(sim.now());
    const double e0 = device.energy_j();
    co_await policy.serve(pipe, q, rec);
    rec.end_s = sim::to_seconds(sim.now());
    if (auto* timeline = device.timeline()) {
      std::string label = "query ";
      label.append(user.user_id).append("#").append(std::to_string(i));
      timeline->span("queries", label, arrival, sim.now(), "query");
    }
    rec.energy_j = device.energy_j() - e0;
    // Quality: an answer generated for this query stands for the reference answer; an answer
    // served from the QA bank is scored against it (ROUGE-L F, sentence BLEU-4).
    const traces::AnswerScore score = traces::score_served_answer(rec.served_answer, q.answer_text);
    rec.rouge_l = score.rouge_l;
    rec.bleu = score.bleu;
    out.push_back(std::move(rec));
  }
}

}  // namespace mobisim::policies
