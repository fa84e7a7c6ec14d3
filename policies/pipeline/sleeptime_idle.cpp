#include "policies/pipeline/sleeptime_idle.h"

#include "policies/rag/sleeptime.h"
#include "sim/registry.h"

namespace mobisim::policies::pipeline {

ParamSchema SleepTimeIdle::schema() {
  ParamSchema s;
  add_sleeptime_idle_params(s);
  s.text("reuse_mode", std::string("kv_projection"),
         "with a chunk_tree: what a background prefill saves per cached token: kv_projection | prefix_skip (payload "
         "kv) | qkv_projection (payload qkv)")
      .in({"qkv_projection", "kv_projection", "prefix_skip"});
  return s;
}

namespace {
EngineOptions sleeptime_idle_options(const Params& p) {
  EngineOptions o;
  o.reuse = parse_reuse_mode(p.text("reuse_mode"));
  read_sleeptime_idle_params(p, o);  // QA bank on; predictions fill it, never the tree
  return o;
}
}  // namespace

SleepTimeIdle::SleepTimeIdle(const Params& p) : CachingIdle(sleeptime_idle_options(p), p, "sleeptime") {}

MOBISIM_REGISTER(IdleStage, SleepTimeIdle, "sleeptime",
                 "Sleep-time Compute: questions predicted from raw chunks in idle time, answered into the app's "
                 "semantic answer cache.")

}  // namespace mobisim::policies::pipeline
