#include "sim/stats.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "sim/error.h"
#include "sim/h5.h"
#include "sim/simulator.h"

namespace mobisim::sim {

TimeWeighted::TimeWeighted(Simulator& sim, std::string name)
    : sim_(&sim), name_(std::move(name)), start_(sim.now()), last_(sim.now()) {
  sim.clock(this);
}

TimeWeighted::~TimeWeighted() {
  if (sim_) sim_->unclock(this);
}

void TimeWeighted::set(double v) {
  if (!sim_)
    throw Error(fmt::format("internal: time-weighted statistic '{}' changed after its simulation ended", name_));
  const Time now = sim_->now();
  area_ += value_ * static_cast<double>(now - last_);
  last_ = now;
  value_ = v;
  max_ = std::max(max_, v);
}

Time TimeWeighted::end() const { return sim_ ? sim_->now() : end_; }

void TimeWeighted::close(Time end) {
  if (!sim_) return;
  end_ = std::max(end, last_);
  sim_ = nullptr;
}

double TimeWeighted::mean() const {
  const Time end_time = end();
  const double span = static_cast<double>(end_time - start_);
  if (span <= 0) return value_;
  return (area_ + value_ * static_cast<double>(end_time - last_)) / span;
}

double Histogram::sum() const { return std::accumulate(samples_.begin(), samples_.end(), 0.0); }
double Histogram::mean() const { return samples_.empty() ? 0.0 : sum() / static_cast<double>(samples_.size()); }
double Histogram::min() const {
  return samples_.empty() ? 0.0 : *std::min_element(samples_.begin(), samples_.end());
}
double Histogram::max() const {
  return samples_.empty() ? 0.0 : *std::max_element(samples_.begin(), samples_.end());
}

double Histogram::percentile(double p) const {
  if (samples_.empty()) return 0.0;
  // The two closest ranks by selection, not a full sort (O(n): results are written for histograms
  // of millions of samples); the values are those of the sorted order exactly.
  std::vector<double> s = samples_;
  const double rank = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(s.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(rank));
  const auto lo_it = s.begin() + static_cast<std::ptrdiff_t>(lo);
  std::nth_element(s.begin(), lo_it, s.end());
  const double at_lo = *lo_it;
  const double at_hi = lo + 1 < s.size() ? *std::min_element(lo_it + 1, s.end()) : at_lo;
  const double frac = rank - static_cast<double>(lo);
  return at_lo + (at_hi - at_lo) * frac;
}

StatGroup::Entry& StatGroup::new_entry(const std::string& name, const std::string& unit, const std::string& doc) {
  for (const auto& e : entries_)
    if (e.name == name) throw Error(fmt::format("internal: statistic '{}.{}' declared twice", name_, name));
  entries_.push_back(Entry{name, unit, doc, nullptr, nullptr, nullptr});
  return entries_.back();
}

Counter& StatGroup::counter(const std::string& name, const std::string& unit, const std::string& doc) {
  auto& e = new_entry(name, unit, doc);
  e.counter = std::make_unique<Counter>();
  return *e.counter;
}

TimeWeighted& StatGroup::time_weighted(Simulator& sim, const std::string& name, const std::string& unit,
                                       const std::string& doc) {
  auto& e = new_entry(name, unit, doc);
  e.tw = std::make_unique<TimeWeighted>(sim, name_ + "/" + name);
  return *e.tw;
}

Histogram& StatGroup::histogram(const std::string& name, const std::string& unit, const std::string& doc) {
  auto& e = new_entry(name, unit, doc);
  e.hist = std::make_unique<Histogram>();
  return *e.hist;
}

StatGroup& StatGroup::child(const std::string& name, const std::string& doc) {
  const auto [it, inserted] = child_index_.try_emplace(name, children_.size());
  if (inserted) children_.push_back(std::make_unique<StatGroup>(name, doc));
  return *children_[it->second];
}

namespace {

const char* kind_of(bool counter, bool time_weighted) {
  return counter ? "counter" : time_weighted ? "time_weighted" : "histogram";
}

}  // namespace

bool StatGroup::same_shape(const StatGroup& other) const {
  if (entries_.size() != other.entries_.size() || children_.size() != other.children_.size()) return false;
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    const Entry &a = entries_[i], &b = other.entries_[i];
    const bool same_kind = (a.counter != nullptr) == (b.counter != nullptr) && (a.tw != nullptr) == (b.tw != nullptr);
    if (a.name != b.name || a.unit != b.unit || a.doc != b.doc || !same_kind) return false;
  }
  for (std::size_t i = 0; i < children_.size(); ++i)
    if (children_[i]->name_ != other.children_[i]->name_ || !children_[i]->same_shape(*other.children_[i])) return false;
  return true;
}

void StatGroup::write_column_level(const std::vector<const StatGroup*>& members, const H5::Group& g) {
  const StatGroup& first = *members.front();
  const std::size_t n = members.size();
  for (std::size_t i = 0; i < first.entries_.size(); ++i) {
    const Entry& e = first.entries_[i];
    H5::Group s = h5::make_group(g, e.name);
    h5::write_attr(s, "unit", e.unit);
    h5::write_attr(s, "doc", e.doc);
    h5::write_attr(s, "kind", kind_of(e.counter != nullptr, e.tw != nullptr));
    auto column = [&](const char* name, auto value_of) {
      std::vector<double> v(n);
      for (std::size_t m = 0; m < n; ++m) v[m] = value_of(members[m]->entries_[i]);
      h5::write_dataset(s, name, v, e.unit);
    };
    if (e.counter) {
      column("value", [](const Entry& x) { return x.counter->value(); });
    } else if (e.tw) {
      column("mean", [](const Entry& x) { return x.tw->mean(); });
      column("max", [](const Entry& x) { return x.tw->max(); });
      column("value", [](const Entry& x) { return x.tw->value(); });
    } else {
      std::vector<std::int64_t> count(n), offsets{0};
      std::vector<double> samples;
      for (std::size_t m = 0; m < n; ++m) {
        const auto& h = *members[m]->entries_[i].hist;
        count[m] = static_cast<std::int64_t>(h.count());
        samples.insert(samples.end(), h.samples().begin(), h.samples().end());
        offsets.push_back(static_cast<std::int64_t>(samples.size()));
      }
      h5::write_dataset(s, "count", count, "count");
      column("mean", [](const Entry& x) { return x.hist->mean(); });
      column("min", [](const Entry& x) { return x.hist->min(); });
      column("max", [](const Entry& x) { return x.hist->max(); });
      column("p50", [](const Entry& x) { return x.hist->percentile(50); });
      column("p90", [](const Entry& x) { return x.hist->percentile(90); });
      column("p99", [](const Entry& x) { return x.hist->percentile(99); });
      // Member m's samples are samples[sample_offsets[m] : sample_offsets[m + 1]].
      h5::write_dataset(s, "samples", samples, e.unit);
      h5::write_dataset(s, "sample_offsets", offsets, "index");
    }
  }
  for (std::size_t c = 0; c < first.children_.size(); ++c) {
    H5::Group sub = h5::make_group(g, first.children_[c]->name_);
    if (!first.children_[c]->doc_.empty()) h5::write_attr(sub, "doc", first.children_[c]->doc_);
    std::vector<const StatGroup*> next(n);
    for (std::size_t m = 0; m < n; ++m) next[m] = members[m]->children_[c].get();
    write_column_level(next, sub);
  }
}

void StatGroup::write_members_as_columns(const H5::Group& g) const {
  H5::Group t = h5::make_group(g, "by_" + member_column_);
  h5::write_attr(t, "layout", "columns");
  h5::write_attr(t, "doc", "one value per " + member_column_ + ", in the order of the '" + member_column_ +
                               "' dataset (histograms: samples concatenated, split by sample_offsets)");
  std::vector<std::string> names;
  std::vector<const StatGroup*> members;
  for (const auto& c : children_) {
    names.push_back(c->name_);
    members.push_back(c.get());
  }
  h5::write_dataset(t, member_column_, names);
  write_column_level(members, t);
}

void StatGroup::write(const H5::Group& parent) const {
  H5::Group g = h5::make_group(parent, name_);
  if (!doc_.empty()) h5::write_attr(g, "doc", doc_);
  for (const auto& e : entries_) {
    H5::Group s = h5::make_group(g, e.name);
    h5::write_attr(s, "unit", e.unit);
    h5::write_attr(s, "doc", e.doc);
    if (e.counter) {
      h5::write_attr(s, "kind", "counter");
      h5::write_attr(s, "value", e.counter->value());
    } else if (e.tw) {
      h5::write_attr(s, "kind", "time_weighted");
      h5::write_attr(s, "mean", e.tw->mean());
      h5::write_attr(s, "max", e.tw->max());
      h5::write_attr(s, "value", e.tw->value());
    } else if (e.hist) {
      h5::write_attr(s, "kind", "histogram");
      h5::write_attr(s, "count", static_cast<std::int64_t>(e.hist->count()));
      h5::write_attr(s, "mean", e.hist->mean());
      h5::write_attr(s, "min", e.hist->min());
      h5::write_attr(s, "max", e.hist->max());
      h5::write_attr(s, "p50", e.hist->percentile(50));
      h5::write_attr(s, "p90", e.hist->percentile(90));
      h5::write_attr(s, "p99", e.hist->percentile(99));
      h5::write_dataset(s, "samples", e.hist->samples(), e.unit);
    }
  }
  const bool columns = !member_column_.empty() && !children_.empty() &&
                       std::all_of(children_.begin() + 1, children_.end(),
                                   [&](const auto& c) { return c->same_shape(*children_.front()); });
  if (columns) {
    write_members_as_columns(g);
  } else {
    for (const auto& c : children_) c->write(g);
  }
}

std::vector<std::pair<std::string, double>> StatGroup::flatten(const std::string& prefix) const {
  std::vector<std::pair<std::string, double>> out;
  const std::string base = prefix.empty() ? name_ : prefix + "." + name_;
  for (const auto& e : entries_) {
    if (e.counter) out.emplace_back(base + "." + e.name, e.counter->value());
    if (e.tw) out.emplace_back(base + "." + e.name + ".mean", e.tw->mean());
    if (e.hist) out.emplace_back(base + "." + e.name + ".mean", e.hist->mean());
  }
  for (const auto& c : children_) {
    auto sub = c->flatten(base);
    out.insert(out.end(), sub.begin(), sub.end());
  }
  return out;
}

}  // namespace mobisim::sim
