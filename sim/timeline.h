#pragma once
// Timeline export in Chrome trace / Perfetto JSON ("traceEvents" with complete
// events). Each simulated run (e.g. one policy x one user) is one Perfetto
// *process*, named after the run, and each device unit it drives is a *thread*
// of that process, so runs that all start at t = 0 sit side by side instead of
// on top of each other. Open the file in https://ui.perfetto.dev or
// chrome://tracing. Devices record spans only when a process is attached, so a
// run without --timeline pays nothing.
//
// Threading: create every process (Timeline::process) before simulations run in
// parallel; afterwards each process is written by its own simulation only, and
// the file lists processes in creation order, so it does not depend on the
// thread count.
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "sim/time.h"

namespace mobisim::sim {

// Which runs and which window of simulated time a timeline keeps. Processes carry
// labels (e.g. policy=percache, user=u3); a filter on a label keeps the processes
// whose label is one of the listed values.
struct TimelineFilter {
  std::map<std::string, std::vector<std::string>> labels;  // label -> accepted values
  Time from = 0;
  Time to = std::numeric_limits<Time>::max();

  // "policy=percache|naive,user=u0,from_s=10,to_s=20"; `known_labels` are the label keys
  // allowed besides from_s/to_s. Throws UsageError naming the bad part.
  static TimelineFilter parse(const std::string& text, const std::vector<std::string>& known_labels);
  bool accepts(const std::map<std::string, std::string>& process_labels) const;
  bool overlaps(Time start, Time end) const { return end >= from && start <= to; }
};

// The tracks of one simulated run.
class TimelineProcess {
 public:
  TimelineProcess(std::string name, TimelineFilter window) : name_(std::move(name)), window_(std::move(window)) {}
  // A busy span on `track` (e.g. "pixel7/npu") from `start` to `end`.
  void span(const std::string& track, const std::string& name, Time start, Time end,
            const std::string& category = "work");
  void instant(const std::string& track, const std::string& name, Time at);
  // A sample of a counter (a Perfetto counter track named "<track> <name>"), e.g. a temperature.
  void counter(const std::string& track, const std::string& name, Time at, double value);
  std::size_t size() const { return events_.size(); }
  const std::string& name() const { return name_; }

 private:
  friend class Timeline;
  int track_id(const std::string& track);
  struct Ev {
    int tid;
    std::string name, cat;
    Time start, end;
    bool instant;
    bool counter = false;
    double value = 0;
  };
  std::string name_;
  TimelineFilter window_;
  std::vector<std::string> tracks_;  // tid - 1 -> track name, in first-use order
  std::map<std::string, int> track_ids_;
  std::vector<Ev> events_;
};

class Timeline {
 public:
  explicit Timeline(TimelineFilter filter = {}) : filter_(std::move(filter)) {}
  // A new process for one simulated run, or nullptr when the filter excludes it.
  TimelineProcess* process(const std::string& name, const std::map<std::string, std::string>& labels = {});
  std::size_t size() const;  // events over all processes
  std::size_t processes() const { return processes_.size(); }
  std::string to_json() const;
  void write(const std::string& path) const;  // atomic
  // Where the timeline came from (config file, overrides, version): written as the trace's
  // "otherData" object, which Perfetto shows under "metadata".
  void set_metadata(std::map<std::string, std::string> metadata) { metadata_ = std::move(metadata); }
  // UsageError when a label value of the filter matched none of the runs asked for so far (a typo
  // such as policy=percahce would otherwise write an empty timeline), naming the values the runs had.
  void check_filter_matched() const;

 private:
  TimelineFilter filter_;
  std::vector<std::unique_ptr<TimelineProcess>> processes_;
  std::map<std::string, std::string> metadata_;
  std::map<std::string, std::vector<std::string>> seen_labels_;  // label -> values of every run, first-seen order
};

}  // namespace mobisim::sim
