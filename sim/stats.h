#pragma once
// Statistics that mirror the component tree (as Ramulator prints them): a
// `StatGroup` owns named counters, time-weighted averages, histograms and
// child groups. Components bind a reference once and bump it on the hot path
// (no lookups by string). The tree is written to the result file under /stats.
#include <H5Cpp.h>

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "sim/time.h"

namespace mobisim::sim {

class Simulator;

class Counter {
 public:
  void add(double v = 1.0) { value_ += v; }
  double value() const { return value_; }

 private:
  double value_ = 0.0;
};

// The time-average of a piecewise-constant quantity (queue length, bytes resident).
//
// It reads its simulator's clock only while that simulation is running. The simulator
// closes every statistic it clocks when it shuts down (Simulator::shutdown(), also run by
// its destructor): from then on the statistic holds plain values (its mean is over
// [creation, end of simulation]) and no longer refers to the simulator, so it can be read
// and written to a result file long after the simulator is gone. Changing a closed
// statistic is a checked error. A statistic destroyed first unregisters itself.
class TimeWeighted {
 public:
  TimeWeighted(Simulator& sim, std::string name);
  ~TimeWeighted();
  TimeWeighted(const TimeWeighted&) = delete;
  TimeWeighted& operator=(const TimeWeighted&) = delete;

  void set(double v);  // throws sim::Error once closed
  void add(double dv) { set(value_ + dv); }
  double value() const { return value_; }
  double max() const { return max_; }
  double mean() const;  // over [creation, now] while open; [creation, close] once closed
  bool closed() const { return sim_ == nullptr; }
  Time end() const;     // the close time (or the current time while open)
  // Freezes the statistic at `end` (called by the simulator; idempotent).
  void close(Time end);

 private:
  Simulator* sim_;  // null once closed
  std::string name_;
  Time start_, last_, end_ = 0;
  double value_ = 0.0, max_ = 0.0, area_ = 0.0;
};

// Keeps every sample (runs here record thousands, not billions), so percentiles are exact.
class Histogram {
 public:
  void add(double v) { samples_.push_back(v); }
  std::size_t count() const { return samples_.size(); }
  double sum() const;
  double mean() const;
  double min() const;
  double max() const;
  // Linear interpolation between closest ranks (numpy's default); p in [0, 100].
  double percentile(double p) const;
  const std::vector<double>& samples() const { return samples_; }

 private:
  std::vector<double> samples_;
};

class StatGroup {
 public:
  explicit StatGroup(std::string name, std::string doc = "") : name_(std::move(name)), doc_(std::move(doc)) {}
  Counter& counter(const std::string& name, const std::string& unit, const std::string& doc);
  TimeWeighted& time_weighted(Simulator& sim, const std::string& name, const std::string& unit,
                              const std::string& doc);
  Histogram& histogram(const std::string& name, const std::string& unit, const std::string& doc);
  StatGroup& child(const std::string& name, const std::string& doc = "");
  const std::string& name() const { return name_; }

  // Declares the children members of a population of like-shaped groups (one per user, one
  // per session), written as columns instead of one HDF5 group each: a dataset
  // `<member_column>` naming the members, and for every statistic path one group whose
  // datasets hold a value per member. Thousands of small HDF5 groups cost more to write than
  // the simulations that filled them; the columns read straight into pandas. Children whose
  // shapes differ (names, kinds or units of their statistics) are written as groups.
  void tabulate_children(std::string member_column) { member_column_ = std::move(member_column); }

  // Writes the tree as HDF5 groups; scalars become attributes `value`/`mean`, histograms get
  // a `samples` dataset and p50/p90/p99 attributes. Tabulated children: see above.
  void write(const H5::Group& parent) const;
  // A flat "path = value unit" listing (for logs and tests).
  std::vector<std::pair<std::string, double>> flatten(const std::string& prefix = "") const;

 private:
  struct Entry {
    std::string name, unit, doc;
    std::unique_ptr<Counter> counter;
    std::unique_ptr<TimeWeighted> tw;
    std::unique_ptr<Histogram> hist;
  };
  Entry& new_entry(const std::string& name, const std::string& unit, const std::string& doc);
  bool same_shape(const StatGroup& other) const;
  void write_members_as_columns(const H5::Group& g) const;
  static void write_column_level(const std::vector<const StatGroup*>& members, const H5::Group& g);
  std::string name_, doc_;
  std::vector<Entry> entries_;
  std::vector<std::unique_ptr<StatGroup>> children_;
  std::unordered_map<std::string, std::size_t> child_index_;  // children_ by name (populations are large)
  std::string member_column_;                                 // empty: children are written as groups
};

}  // namespace mobisim::sim
