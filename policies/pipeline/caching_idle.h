#pragma once
// What the `percache_scheduler` and `sleeptime` idle stages share: the rag policies' caching
// engine (policies/rag/cache_engine.h, the CachingPolicy that PerCache's and Sleep-time Compute's
// own request loops run) working on the QA bank of the app's `semantic` answer cache (none for
// PerCache's `qa_bank: false`: see run_without_answer_cache) and, when the
// app's KV-reuse stage is a `chunk_tree`, on its tree. The engine's idle work runs as the
// pipeline's idle stage; its serving is the pipeline's (the answer cache and the tree look
// requests up in the same bank and tree), and what the engine does after serving a query is
// called from after(): the served query's new slices and QA entry are written by the engine's
// deferred store job (the pipeline does not store them), a QA hit's real answer is generated later,
// the query joins the history predictions read.
//
// The engine runs on a RagPipeline of its own over the app's workload (IdleWorkload), on the same
// Device, unit and priority as the app, with the answer cache's embed_ms / match_ms and the app's
// retrieval_ms / kv_match_ms as its fixed costs. Its scheduler starts a job only when the job's
// estimate fits before the next request (Request::next_arrival_s; unknown: whatever the wait); a
// job still running when the next request comes is interrupted at its next step (the step in
// flight on the device finishes first, so the request may queue behind it) and runs again, from
// the start, in a later idle period.
//
// Not a registered stage: percache_idle.h, sleeptime_idle.h and reactive_store_idle.h are.
#include <memory>
#include <optional>

#include "policies/pipeline/chunk_tree_reuse.h"
#include "policies/pipeline/idle_stage.h"
#include "policies/pipeline/semantic_answer_cache.h"
#include "policies/rag/cache_engine.h"
#include "sim/params.h"
#include "sim/stats.h"

namespace mobisim::policies::pipeline {

class CachingIdle : public IdleStage {
 public:
  void link(const StageLinks& links) override;
  void use_workload(std::shared_ptr<const IdleWorkload> workload, const models::CostModel& cost) override;
  void begin(devices::Device& device, const models::CostModel& cost, const std::string& owner) override;
  bool needs_rag_workload() const override { return true; }
  bool stores_answers() const override { return answers_ != nullptr; }
  bool stores_kv() const override { return tree_ != nullptr; }
  sim::Task<void> after(devices::Device& device, const std::string& owner, KvReuse& reuse, const Request& r,
                        bool answer_hit, double kv_bytes_per_token) override;
  IdleClaim claim(devices::Device& device, const std::string& owner, const Request& r) override;
  // The engine (for tests and reports): its counters, its view of the bank and the tree.
  const CachingPolicy& engine() const { return *engine_; }

 protected:
  // `options`: the engine's idle-work options read from the stage's parameters; link() completes
  // them from the linked stages. `name`: the stage's registered name, for errors.
  CachingIdle(EngineOptions options, const Params& p, const char* name);
  // The engine's options once the stages are known (the answer cache's threshold, the tree's
  // rules); a stage adjusts what its document says about the tree.
  virtual void complete_options(EngineOptions& o) const { (void)o; }
  bool has_tree() const { return tree_ != nullptr; }
  // Runs without an answer cache (PerCache's `qa_bank: false`): the engine shares no QA bank, and
  // `embed_ms` is the query embedding's fixed cost, which the app then counts in its retrieval_ms
  // (no stage of the pipeline embeds the query; the engine's background retrievals are charged
  // the app's retrieval_ms minus embed_ms, its background embeddings embed_ms).
  void run_without_answer_cache(double embed_ms) { no_answer_cache_embed_ms_ = embed_ms; }
  // Works on whichever caches the app has (a `semantic` answer cache, a `chunk_tree`, or both; at
  // least one): for a stage that only stores what was served (reactive_store), whose engine never
  // embeds or retrieves, so it needs no embedding cost without an answer cache.
  void work_on_the_apps_caches() { caches_optional_ = true; }

 private:
  // The engine's idle work until the next request (or, unknown, until claim()).
  sim::Task<void> idle_until(double next_arrival_s);
  [[noreturn]] void fail(const std::string& message) const;
  // ConfigError when the schedule changes a value no linked stage owns (link() calls it).
  void check_schedule_owners() const;
  // Links the answer cache, or checks there is none (qa_bank: false); link() calls it.
  void link_answer_cache(const StageLinks& links);

  EngineOptions options_;
  ConfigSource source_;
  YAML::Node node_;
  const char* name_;
  std::optional<double> no_answer_cache_embed_ms_;  // set: the stage runs without an answer cache
  bool caches_optional_ = false;  // work_on_the_apps_caches()
  SemanticAnswerCache* answers_ = nullptr;  // the linked stages (the pipeline owns them)
  ChunkTreeReuse* tree_ = nullptr;
  std::shared_ptr<const IdleWorkload> workload_;
  std::shared_ptr<const KnowledgeIndex> knowledge_;  // when the engine retrieves or predicts
  PipelineConfig config_;  // the engine pipeline's settings, from the workload and the stages
  sim::StatGroup stats_{"idle"};
  std::unique_ptr<RagPipeline> pipe_;  // built by begin(): refers to config_, stats_ and the workload
  // Built by link(); refers to pipe_ once begin() ran, so it is declared after pipe_ (destroyed first).
  std::unique_ptr<CachingPolicy> engine_;
};

}  // namespace mobisim::policies::pipeline
