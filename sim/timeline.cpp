#include "sim/timeline.h"

#include <fmt/format.h>

#include "sim/strings.h"

#include <algorithm>
#include <cmath>

#include "sim/atomic_file.h"
#include "sim/error.h"

namespace mobisim::sim {

// ---------------------------------------------------------------------------
// Filter
// ---------------------------------------------------------------------------
TimelineFilter TimelineFilter::parse(const std::string& text, const std::vector<std::string>& known_labels) {
  TimelineFilter f;
  if (text.empty()) return f;
  auto seconds = [&](const std::string& part, const std::string& v) {
    char* end = nullptr;
    const double s = std::strtod(v.c_str(), &end);
    if (v.empty() || end != v.c_str() + v.size() || !std::isfinite(s) || s < 0 || s > 1e9)
      throw UsageError(fmt::format("--timeline-filter '{}': '{}' expects seconds in [0, 1e9]", text, part));
    return from_seconds(s);
  };
  for (const auto& part : split(text, ',')) {
    const auto eq = part.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == part.size())
      throw UsageError(fmt::format("--timeline-filter '{}': expected KEY=VALUE parts separated by ',', got '{}'",
                                   text, part));
    const std::string key = part.substr(0, eq), value = part.substr(eq + 1);
    if (key == "from_s") {
      f.from = seconds(part, value);
    } else if (key == "to_s") {
      f.to = seconds(part, value);
    } else if (std::find(known_labels.begin(), known_labels.end(), key) != known_labels.end()) {
      for (const auto& v : split(value, '|')) f.labels[key].push_back(v);
    } else {
      throw UsageError(fmt::format("--timeline-filter '{}': unknown key '{}' (expected {}from_s, to_s)", text, key,
                                   fmt::format("{}{}", fmt::join(known_labels, ", "), known_labels.empty() ? "" : ", ")));
    }
  }
  if (f.from > f.to) throw UsageError(fmt::format("--timeline-filter '{}': from_s is after to_s", text));
  return f;
}

bool TimelineFilter::accepts(const std::map<std::string, std::string>& process_labels) const {
  for (const auto& [key, values] : labels) {
    auto it = process_labels.find(key);
    if (it == process_labels.end()) return false;
    if (std::find(values.begin(), values.end(), it->second) == values.end()) return false;
  }
  return true;
}

// ---------------------------------------------------------------------------
// One process
// ---------------------------------------------------------------------------
int TimelineProcess::track_id(const std::string& track) {
  auto it = track_ids_.find(track);
  if (it != track_ids_.end()) return it->second;
  tracks_.push_back(track);
  const int id = static_cast<int>(tracks_.size());
  track_ids_.emplace(track, id);
  return id;
}

void TimelineProcess::span(const std::string& track, const std::string& name, Time start, Time end,
                           const std::string& category) {
  if (!window_.overlaps(start, end)) return;
  events_.push_back({track_id(track), name, category, start, end, false});
}

void TimelineProcess::instant(const std::string& track, const std::string& name, Time at) {
  if (!window_.overlaps(at, at)) return;
  events_.push_back({track_id(track), name, "mark", at, at, true});
}

void TimelineProcess::counter(const std::string& track, const std::string& name, Time at, double value) {
  if (!window_.overlaps(at, at)) return;
  events_.push_back({0, track + " " + name, "counter", at, at, false, true, value});
}

// ---------------------------------------------------------------------------
// The file
// ---------------------------------------------------------------------------
TimelineProcess* Timeline::process(const std::string& name, const std::map<std::string, std::string>& labels) {
  for (const auto& [key, value] : labels) {
    auto& seen = seen_labels_[key];
    if (std::find(seen.begin(), seen.end(), value) == seen.end()) seen.push_back(value);
  }
  if (!filter_.accepts(labels)) return nullptr;
  processes_.push_back(std::make_unique<TimelineProcess>(name, filter_));
  return processes_.back().get();
}

void Timeline::check_filter_matched() const {
  for (const auto& [key, values] : filter_.labels) {
    const auto it = seen_labels_.find(key);
    for (const auto& v : values) {
      if (it != seen_labels_.end() && std::find(it->second.begin(), it->second.end(), v) != it->second.end()) continue;
      if (it == seen_labels_.end())
        throw UsageError(fmt::format("--timeline-filter: {}={} names no run: this experiment's runs have no '{}' label",
                                     key, v, key));
      throw UsageError(fmt::format("--timeline-filter: {}={} names no run (the runs have {}: {})", key, v, key,
                                   fmt::join(it->second, ", ")));
    }
  }
}

std::size_t Timeline::size() const {
  std::size_t n = 0;
  for (const auto& p : processes_) n += p->size();
  return n;
}

static std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20)
          out += fmt::format("\\u{:04x}", static_cast<int>(c));
        else
          out += c;
    }
  }
  return out;
}

std::string Timeline::to_json() const {
  std::string out = "{\"displayTimeUnit\":\"ms\",";
  if (!metadata_.empty()) {
    out += "\"otherData\":{";
    bool first_key = true;
    for (const auto& [k, v] : metadata_) {
      if (!first_key) out += ",";
      first_key = false;
      out += fmt::format(R"("{}":"{}")", json_escape(k), json_escape(v));
    }
    out += "},\n";
  }
  out += "\"traceEvents\":[\n";
  bool first = true;
  auto sep = [&] {
    if (!first) out += ",\n";
    first = false;
  };
  for (std::size_t p = 0; p < processes_.size(); ++p) {
    const TimelineProcess& proc = *processes_[p];
    const std::size_t pid = p + 1;
    sep();
    out += fmt::format(R"({{"ph":"M","pid":{},"name":"process_name","args":{{"name":"{}"}}}})", pid,
                       json_escape(proc.name_));
    sep();
    out += fmt::format(R"({{"ph":"M","pid":{},"name":"process_sort_index","args":{{"sort_index":{}}}}})", pid, pid);
    for (std::size_t t = 0; t < proc.tracks_.size(); ++t) {
      sep();
      out += fmt::format(R"({{"ph":"M","pid":{},"tid":{},"name":"thread_name","args":{{"name":"{}"}}}})", pid, t + 1,
                         json_escape(proc.tracks_[t]));
    }
    for (const auto& e : proc.events_) {
      sep();
      // Chrome trace timestamps are microseconds; keep nanosecond precision with decimals.
      const double ts = static_cast<double>(e.start) / 1000.0;
      if (e.counter) {
        out += fmt::format(R"({{"ph":"C","pid":{},"ts":{:.3f},"name":"{}","args":{{"value":{}}}}})", pid, ts,
                           json_escape(e.name), e.value);
      } else if (e.instant) {
        out += fmt::format(R"({{"ph":"i","s":"t","pid":{},"tid":{},"ts":{:.3f},"name":"{}","cat":"{}"}})", pid, e.tid,
                           ts, json_escape(e.name), e.cat);
      } else {
        const double dur = static_cast<double>(e.end - e.start) / 1000.0;
        out += fmt::format(R"({{"ph":"X","pid":{},"tid":{},"ts":{:.3f},"dur":{:.3f},"name":"{}","cat":"{}"}})", pid,
                           e.tid, ts, dur, json_escape(e.name), json_escape(e.cat));
      }
    }
  }
  out += "\n]}\n";
  return out;
}

void Timeline::write(const std::string& path) const { write_file_atomic(path, to_json()); }

}  // namespace mobisim::sim
