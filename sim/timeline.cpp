#include "sim/timeline.h"

#include <fmt/format.h>

#include "sim/atomic_file.h"

namespace mobisim::sim {

int Timeline::track_id(const std::string& track) {
  auto it = tracks_.find(track);
  if (it != tracks_.end()) return it->second;
  const int id = static_cast<int>(tracks_.size()) + 1;
  tracks_.emplace(track, id);
  return id;
}

void Timeline::span(const std::string& track, const std::string& name, Time start, Time end,
                    const std::string& category) {
  events_.push_back({track_id(track), name, category, start, end, false});
}

void Timeline::instant(const std::string& track, const std::string& name, Time at) {
  events_.push_back({track_id(track), name, "mark", at, at, true});
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
  std::string out = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  bool first = true;
  auto sep = [&] {
    if (!first) out += ",\n";
    first = false;
  };
  for (const auto& [name, tid] : tracks_) {
    sep();
    out += fmt::format(R"({{"ph":"M","pid":1,"tid":{},"name":"thread_name","args":{{"name":"{}"}}}})", tid,
                       json_escape(name));
  }
  for (const auto& e : events_) {
    sep();
    // Chrome trace timestamps are microseconds; keep nanosecond precision with decimals.
    const double ts = static_cast<double>(e.start) / 1000.0;
    if (e.instant) {
      out += fmt::format(R"({{"ph":"i","s":"t","pid":1,"tid":{},"ts":{:.3f},"name":"{}","cat":"{}"}})", e.tid, ts,
                         json_escape(e.name), e.cat);
    } else {
      const double dur = static_cast<double>(e.end - e.start) / 1000.0;
      out += fmt::format(R"({{"ph":"X","pid":1,"tid":{},"ts":{:.3f},"dur":{:.3f},"name":"{}","cat":"{}"}})", e.tid,
                         ts, dur, json_escape(e.name), json_escape(e.cat));
    }
  }
  out += "\n]}\n";
  return out;
}

void Timeline::write(const std::string& path) const { write_file_atomic(path, to_json()); }

}  // namespace mobisim::sim
