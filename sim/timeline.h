#pragma once
// Timeline export in Chrome trace / Perfetto JSON ("traceEvents" with complete
// events, one track per device unit). Open the file in https://ui.perfetto.dev
// or chrome://tracing. Devices record spans only when a timeline is attached,
// so a run without --timeline pays nothing.
#include <map>
#include <string>
#include <vector>

#include "sim/time.h"

namespace mobisim::sim {

class Timeline {
 public:
  // A busy span on `track` (e.g. "pixel7/npu") from `start` to `end`.
  void span(const std::string& track, const std::string& name, Time start, Time end,
            const std::string& category = "work");
  void instant(const std::string& track, const std::string& name, Time at);
  std::size_t size() const { return events_.size(); }
  std::string to_json() const;
  void write(const std::string& path) const;  // atomic

 private:
  int track_id(const std::string& track);
  struct Ev {
    int tid;
    std::string name, cat;
    Time start, end;
    bool instant;
  };
  std::map<std::string, int> tracks_;
  std::vector<Ev> events_;
};

}  // namespace mobisim::sim
