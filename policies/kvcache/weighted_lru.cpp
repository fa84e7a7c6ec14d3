#include "policies/kvcache/weighted_lru.h"

#include "sim/registry.h"

namespace mobisim::policies::kvcache {

WeightedLru::WeightedLru(const Params& p)
    : count_weight_(p.real("count_weight")),
      recency_weight_(p.real("recency_weight")),
      recency_unit_s_(p.real("recency_unit_s")),
      literal_(p.text("recency") == "literal") {}

ParamSchema WeightedLru::schema() {
  ParamSchema s;
  s.real("count_weight", 0.6, "weight of the access count").non_negative();
  s.real("recency_weight", 0.4, "weight of the recency term").non_negative();
  s.real("recency_unit_s", 3600.0, "age unit of the recency term (the note: hours)").positive().with_unit("s");
  s.text("recency", std::string("age_penalty"),
         "age_penalty: -age/unit (older scores lower; our reading); literal: +age/unit (the note's formula as written)")
      .in({"age_penalty", "literal"});
  return s;
}

double WeightedLru::score(const EntryStats& e, double now_s) const {
  const double age_units = (now_s - e.last_access_s) / recency_unit_s_;
  const double recency = literal_ ? age_units : -age_units;
  return count_weight_ * static_cast<double>(e.access_count) + recency_weight_ * recency;
}

MOBISIM_REGISTER(EvictionPolicy, WeightedLru, "weighted_lru",
                 "The note's weighted LRU: 0.6 x access_count + 0.4 x recency (age counted against the entry).")

}  // namespace mobisim::policies::kvcache
