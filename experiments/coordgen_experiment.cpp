// The `coordgen` experiment driver: context-augmented generation requests (CoordGen section 4)
// under the section 4.1 policies (policies/specdec).
//
// Workload: a RAG trace (traces/rag_trace_io.h, e.g. `mobisim trace import qmsum`) whose texts are
// tokenized with the Llama 2 SentencePiece model. One trace user (a QMSum meeting) = one user:
//   task summary: the user's `general` queries; context = the transcript's chunks in order
//   task rag:     the user's `specific` queries; context = the query's retrieved chunks (top-k)
// capped at max_context_tokens; prompt = context + query; target output = the reference answer
// (capped at max_output_tokens). Earlier answers of the same user form its history store.
//
// Per (policy, user): the policy's drafter replays every request's output (replay_decode: what
// each verification drafts and accepts), the policy turns that into phases of NPU/CPU work, and
// one SimulatedRun replays the phases on the device (energy and the timeline come from there).
//
// Parameters (YAML under `experiment:`):
//   device, model  as in rag_qa
//   workload       {trace, tokenizer, task, max_users, max_requests_per_user, max_context_tokens,
//                   max_output_tokens, allow_missing_predictions}
//   policies       list of {impl: NAME, label: TEXT (optional), ...} (kind specdec_policy)
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>

#include "devices/device.h"
#include "experiments/experiment.h"
#include "experiments/parallel.h"
#include "experiments/simulation.h"
#include "models/cost_model.h"
#include "models/tokenizer.h"
#include "policies/specdec/sd_policies.h"
#include "sim/error.h"
#include "sim/registry.h"
#include "sim/simulator.h"
#include "traces/rag_trace_io.h"

namespace mobisim::experiments {

namespace {

using policies::specdec::DecodeTrace;
using policies::specdec::RequestBreakdown;
using policies::specdec::SpecDecPolicy;

struct CagRequest {
  std::vector<int> prompt;  // context + instruction
  std::vector<int> output;  // target output (reference answer)
};
struct CagUser {
  std::string id;
  std::vector<CagRequest> requests;
};

ParamSchema workload_schema() {
  ParamSchema s;
  s.text("trace", std::nullopt, "HDF5 RAG trace with texts (mobisim trace import qmsum)");
  s.text("tokenizer", std::nullopt, "SentencePiece model for token ids (e.g. ../shared/models/llama2-tokenizer.model)");
  s.text("task", std::string("summary"), "summary (general queries, transcript) or rag (specific, top-k chunks)")
      .in({"summary", "rag"});
  s.integer("max_users", 0, "first N users (0 = all)").non_negative();
  s.integer("max_requests_per_user", 0, "first N requests of each user (0 = all)").non_negative();
  s.integer("max_context_tokens", 2048, "context cap (the document: 1-2K token contexts)").at_least(1).with_unit("tokens");
  s.integer("max_output_tokens", 256, "output cap").at_least(1).with_unit("tokens");
  s.boolean("allow_missing_predictions", false,
            "run calibrating policies on traces without prefill predictions (calibration then charged but not applied)");
  return s;
}

std::vector<int> tokens_of(const models::Tokenizer& tok, const std::string& text) { return tok.encode(text); }

class CoordGenExperiment : public Experiment {
 public:
  explicit CoordGenExperiment(const Params& p) : params_(p) {
    device_ = devices::load_device_profile(p.node("device"), p.source_of("device"));
    model_ = models::load_model_spec(p.node("model"), p.source_of("model"));
    device_.require_npu("the coordgen experiment");
    device_.unit("cpu", "the coordgen experiment (decode / attention)");
    YAML::Node pol = p.node("policies");
    if (!pol.IsSequence() || pol.size() == 0)
      p.fail("policies", fmt::format("expected a non-empty list of policies (known: {})",
                                     fmt::join(Registry<SpecDecPolicy>::instance().names(), ", ")));
    for (std::size_t i = 0; i < pol.size(); ++i) {
      YAML::Node node = yaml_clone(pol[i]);
      std::string label;
      if (node.IsMap() && node["label"]) {
        label = node["label"].as<std::string>();
        node.remove("label");
      }
      const ConfigSource src = p.source_of("policies").element(i);
      auto impl = Registry<SpecDecPolicy>::instance().create(node, src);
      if (label.empty()) label = impl->name();
      for (const auto& e : policies_)
        if (e.label == label)
          throw ConfigError(fmt::format("{}: duplicate policy label '{}'", src.where(pol[i]), label));
      policies_.push_back({label, node, src});
    }
    ParamSchema ws = workload_schema();
    workload_ = std::make_unique<Params>(p.node("workload"), ws, p.source_of("workload"), std::vector<std::string>{});
  }

  static ParamSchema schema() {
    ParamSchema s;
    s.node("device", "device profile with an npu and a cpu unit: built-in name, YAML path or mapping");
    s.node("model", "model: built-in name, YAML path, or {base: NAME, field: override}");
    s.node("workload", "{trace, tokenizer, task, max_users, max_requests_per_user, max_context_tokens, ...}");
    s.node("policies", "list of specdec policies: [{impl: npu_vanilla}, {impl: coordgen}, ...]");
    return s;
  }

  std::string default_plot() const override { return "coordgen_latency.py"; }

  void prepare(RunContext& ctx) override {
    (void)ctx;
    const Params& w = *workload_;
    const std::string trace_path = w.text("trace"), tok_path = w.text("tokenizer");
    if (!std::filesystem::exists(trace_path))
      w.fail("trace", fmt::format("no trace file '{}' (create it with: mobisim trace import qmsum --dir "
                                  "../shared/data/qmsum --split val --tokenizer TOKENIZER --out {})",
                                  trace_path, trace_path));
    const traces::RagTrace trace = traces::read_rag_trace(trace_path);
    const auto tok = models::load_sentencepiece(tok_path);
    const bool summary = w.text("task") == "summary";
    const auto max_users = static_cast<std::size_t>(w.integer("max_users"));
    const auto max_req = static_cast<std::size_t>(w.integer("max_requests_per_user"));
    const auto max_ctx = static_cast<std::size_t>(w.integer("max_context_tokens"));
    const auto max_out = static_cast<std::size_t>(w.integer("max_output_tokens"));
    users_.clear();
    for (const auto& u : trace.users) {
      if (max_users && users_.size() >= max_users) break;
      CagUser cu{u.user_id, {}};
      std::vector<int> transcript;
      if (summary)
        for (const auto& c : u.chunks) {
          if (transcript.size() >= max_ctx) break;
          const auto t = tokens_of(*tok, c.text);
          transcript.insert(transcript.end(), t.begin(), t.end());
        }
      for (const auto& q : u.queries) {
        if (max_req && cu.requests.size() >= max_req) break;
        if ((q.kind == "general") != summary || q.answer_text.empty()) continue;
        CagRequest r;
        if (summary) {
          r.prompt = transcript;
        } else {
          const auto& ids = q.retrieved.empty() ? q.relevant : q.retrieved;
          for (auto id : ids) {
            if (id < 0 || static_cast<std::size_t>(id) >= u.chunks.size())
              w.fail("trace", fmt::format("user '{}' query retrieves chunk {} of {}", u.user_id, id, u.chunks.size()));
            const auto t = tokens_of(*tok, u.chunks[id].text);
            r.prompt.insert(r.prompt.end(), t.begin(), t.end());
          }
        }
        if (r.prompt.size() > max_ctx) r.prompt.resize(max_ctx);
        const auto qt = tokens_of(*tok, q.text);
        r.prompt.insert(r.prompt.end(), qt.begin(), qt.end());
        r.output = tokens_of(*tok, q.answer_text);
        if (r.output.size() > max_out) r.output.resize(max_out);
        if (r.output.empty() || r.prompt.empty()) continue;
        cu.requests.push_back(std::move(r));
      }
      if (!cu.requests.empty()) users_.push_back(std::move(cu));
    }
    if (users_.empty()) w.fail("trace", fmt::format("no {} requests with reference answers in '{}'", w.text("task"), trace_path));
    // Text traces carry no prefill predictions: calibration cannot be applied to them.
    for (const auto& e : policies_) {
      auto impl = Registry<SpecDecPolicy>::instance().create(e.node, e.source);
      if (impl->drafter() && impl->drafter()->calibrate && !w.boolean("allow_missing_predictions"))
        throw ConfigError(fmt::format(
            "{}: policy '{}' calibrates from prefill predictions, which this trace does not carry; set "
            "workload.allow_missing_predictions: true to run it with calibration charged but not applied, or "
            "use calibrate: false",
            e.source.where(e.node), e.label));
    }
  }

  void run(RunContext& ctx) override {
    ctx.progress(fmt::format("{} users, {} on {}, {} policies", users_.size(), model_.name, device_.name,
                             policies_.size()));
    const policies::specdec::SpecDecEnv env{*device_.npu, device_.unit("cpu", "coordgen"), device_.base_power_w,
                                            models::CostModel(model_)};
    struct Job {
      std::size_t policy, user;
      std::unique_ptr<SpecDecPolicy> impl;
      sim::StatGroup* stats;
      sim::TimelineProcess* timeline;
      std::vector<Row> rows;
    };
    std::vector<Job> jobs;
    for (std::size_t p = 0; p < policies_.size(); ++p) {
      auto& variant = ctx.results.variant(policies_[p].label);
      for (std::size_t u = 0; u < users_.size(); ++u)
        jobs.push_back(Job{p, u, Registry<SpecDecPolicy>::instance().create(policies_[p].node, policies_[p].source),
                           &variant.stats.child(sanitize(users_[u].id)),
                           ctx.timeline_process(policies_[p].label + " / " + users_[u].id,
                                                {{"policy", policies_[p].label},
                                                 {"user", users_[u].id},
                                                 {"device", device_.name}}),
                           {}});
    }
    parallel_for(jobs.size(), ctx.threads, [&](std::size_t j) {
      Job& job = jobs[j];
      simulate_user(*job.impl, env, users_[job.user], *job.stats, job.timeline, job.rows);
    });
    Summary summary;
    for (std::size_t p = 0; p < policies_.size(); ++p) {
      Columns cols;
      for (const auto& job : jobs)
        if (job.policy == p)
          for (const auto& r : job.rows) cols.add(r);
      cols.to_table(ctx.results.variant(policies_[p].label).records);
      summary.add(policies_[p].label, cols);
      ctx.progress(fmt::format("{:>14}: {:7.2f} ms/token, {:.2f} accepted/step, {:.1f} J/request",
                               policies_[p].label, summary.ms_per_token.back(), summary.accepted.back(),
                               summary.energy.back()));
    }
    summary.to_table(ctx.results.summary);
  }

  YAML::Node resolved_config(const YAML::Node& given) const override {
    YAML::Node out = yaml_clone(given);
    out["device"] = yaml_clone(device_.resolved);
    out["model"] = yaml_clone(model_.resolved);
    out["workload"] = workload_->resolved();
    YAML::Node pols(YAML::NodeType::Sequence);
    for (const auto& e : policies_) {
      YAML::Node r = Registry<SpecDecPolicy>::instance().resolve(e.node, e.source);
      r["label"] = e.label;
      pols.push_back(r);
    }
    out["policies"] = pols;
    return out;
  }

 private:
  struct PolicyEntry {
    std::string label;
    YAML::Node node;
    ConfigSource source;
  };
  struct Row {
    std::string user;
    std::int64_t request = 0, prompt_tokens = 0, output_tokens = 0, steps = 0;
    RequestBreakdown b;
    double energy_j = 0, latency_s = 0;
  };
  struct Columns {
    std::vector<std::string> user;
    std::vector<std::int64_t> request, prompt, output, steps;
    std::vector<double> accepted, prefill, sw, calib, decode, draft, latency, ms_tok, energy, mem;
    void add(const Row& r) {
      user.push_back(r.user);
      request.push_back(r.request);
      prompt.push_back(r.prompt_tokens);
      output.push_back(r.output_tokens);
      steps.push_back(r.steps);
      accepted.push_back(r.b.mean_accepted);
      prefill.push_back(r.b.prefill_s);
      sw.push_back(r.b.switch_s);
      calib.push_back(r.b.calibration_s);
      decode.push_back(r.b.decode_s);
      draft.push_back(r.b.draft_s);
      latency.push_back(r.latency_s);
      ms_tok.push_back(r.output_tokens ? 1e3 * r.latency_s / static_cast<double>(r.output_tokens) : 0.0);
      energy.push_back(r.energy_j);
      mem.push_back(r.b.peak_memory_bytes);
    }
    void to_table(h5::Table& t) const {
      t.add("user", user);
      t.add("request", request);
      t.add("prompt_tokens", prompt, "tokens");
      t.add("output_tokens", output, "tokens");
      t.add("steps", steps, "count");
      t.add("accepted_per_step", accepted, "tokens");
      t.add("prefill_s", prefill, "s");
      t.add("switch_s", sw, "s");
      t.add("calibration_s", calib, "s");
      t.add("decode_s", decode, "s");
      t.add("draft_s", draft, "s");
      t.add("latency_s", latency, "s");
      t.add("ms_per_token", ms_tok, "ms");
      t.add("energy_j", energy, "J");
      t.add("peak_memory_bytes", mem, "bytes");
    }
  };
  struct Summary {
    std::vector<std::string> policy;
    std::vector<std::int64_t> requests, tokens;
    std::vector<double> ms_per_token, accepted, energy, mem, prefill, sw, calib, decode, draft;
    void add(const std::string& label, const Columns& c) {
      double lat = 0, acc_w = 0, steps = 0, e = 0, m = 0, pf = 0, s = 0, ca = 0, de = 0, dr = 0;
      std::int64_t tok = 0;
      for (std::size_t i = 0; i < c.latency.size(); ++i) {
        lat += c.latency[i];
        tok += c.output[i];
        acc_w += c.accepted[i] * static_cast<double>(c.steps[i]);
        steps += static_cast<double>(c.steps[i]);
        e += c.energy[i];
        m = std::max(m, c.mem[i]);
        pf += c.prefill[i], s += c.sw[i], ca += c.calib[i], de += c.decode[i], dr += c.draft[i];
      }
      const double n = std::max<double>(1.0, static_cast<double>(c.latency.size()));
      policy.push_back(label);
      requests.push_back(static_cast<std::int64_t>(c.latency.size()));
      tokens.push_back(tok);
      ms_per_token.push_back(tok ? 1e3 * lat / static_cast<double>(tok) : 0.0);
      accepted.push_back(steps > 0 ? acc_w / steps : 0.0);
      energy.push_back(e / n);
      mem.push_back(m);
      prefill.push_back(pf / n), sw.push_back(s / n), calib.push_back(ca / n), decode.push_back(de / n),
          draft.push_back(dr / n);
    }
    void to_table(h5::Table& t) const {
      t.add("policy", policy);
      t.add("requests", requests, "count");
      t.add("output_tokens", tokens, "tokens");
      t.add("ms_per_token", ms_per_token, "ms");
      t.add("accepted_per_step", accepted, "tokens");
      t.add("energy_per_request_j", energy, "J");
      t.add("peak_memory_bytes", mem, "bytes");
      t.add("mean_prefill_s", prefill, "s");
      t.add("mean_switch_s", sw, "s");
      t.add("mean_calibration_s", calib, "s");
      t.add("mean_decode_s", decode, "s");
      t.add("mean_draft_s", draft, "s");
    }
  };

  static std::string sanitize(const std::string& s) {
    std::string out;
    for (char c : s) out += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_') ? c : '_';
    return out.empty() ? "user" : out;
  }

  static sim::Task<void> replay(sim::Simulator& sim, devices::Device& device, const std::vector<RequestBreakdown>& bs,
                                std::vector<Row>& rows) {
    for (std::size_t i = 0; i < bs.size(); ++i) {
      const double t0 = sim::to_seconds(sim.now()), e0 = device.energy_j();
      for (const auto& ph : bs[i].phases) co_await device.busy(ph.unit, sim::from_seconds(ph.seconds), ph.label);
      rows[i].latency_s = sim::to_seconds(sim.now()) - t0;
      rows[i].energy_j = device.energy_j() - e0;
    }
  }

  void simulate_user(const SpecDecPolicy& policy, const policies::specdec::SpecDecEnv& env, const CagUser& user,
                     sim::StatGroup& stats, sim::TimelineProcess* timeline, std::vector<Row>& rows) const {
    // Acceptance: the policy's drafter over the user's requests in order, history growing.
    policies::specdec::HistoryStore history;
    std::vector<RequestBreakdown> bs;
    for (std::size_t i = 0; i < user.requests.size(); ++i) {
      const auto& rq = user.requests[i];
      DecodeTrace trace;
      if (auto opt = policy.drafter()) {
        opt->calibrate = false;  // text traces carry no prefill predictions (checked in prepare)
        policies::specdec::CoordGenDrafter d(*opt, &history);
        trace = policies::specdec::replay_decode(rq.prompt, rq.output, d);
      } else {
        trace.steps.assign(rq.output.size(), {0, 0});
      }
      history.add(rq.output);
      bs.push_back(policy.run(env, static_cast<std::int64_t>(rq.prompt.size()), trace));
      Row r;
      r.user = user.id;
      r.request = static_cast<std::int64_t>(i);
      r.prompt_tokens = static_cast<std::int64_t>(rq.prompt.size());
      r.output_tokens = static_cast<std::int64_t>(rq.output.size());
      r.steps = bs.back().steps;
      r.b = bs.back();
      r.b.phases.clear();
      rows.push_back(std::move(r));
    }
    SimulatedRun run(device_, stats.child("device"), timeline);
    run.start(replay(run.sim(), run.device(), bs, rows), "user " + user.id);
    run.run();
  }

  Params params_;
  devices::DeviceProfile device_;
  models::ModelSpec model_;
  std::vector<PolicyEntry> policies_;
  std::unique_ptr<Params> workload_;
  std::vector<CagUser> users_;
};

MOBISIM_REGISTER(Experiment, CoordGenExperiment, "coordgen",
                 "CoordGen (seed 004): CAG requests under NPU/CPU vanilla, SAM, PLD, EAGLE, +G, +G+SD and CoordGen.")

}  // namespace
}  // namespace mobisim::experiments
