#include "experiments/fidelity/sustained_probe.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <limits>
#include <thread>
#include <unistd.h>

#include "devices/device.h"
#include "devices/engine.h"
#include "experiments/experiment.h"
#include "sim/builtin_configs.h"
#include "sim/error.h"
#include "sim/h5.h"
#include "sim/registry.h"

namespace mobisim::fidelity {
namespace {

namespace fs = std::filesystem;

const std::vector<std::string> kMetrics{"rate_ratio",      "rate",         "first_request_below", "requests_before_floor",
                                        "floor_mhz",       "peak_junction_c", "peak_skin_c",      "junction_max_mean",
                                        "heating_rate",    "time_to_loss", "clock_ratio",         "minute_of_loss",
                                        "mean_power_w",    "battery_drop_pct", "junction_at_floor_c", "window_rate_ratio"};

std::vector<double> read_or_empty(const h5::Reader& r, const std::string& path) {
  return r.exists(path) ? r.doubles(path) : std::vector<double>();
}

// Requests [a, b] (1-based, inclusive) as 0-based indices, checked against the run.
std::pair<std::size_t, std::size_t> request_span(const std::vector<double>& span, std::size_t n, const char* what) {
  if (span.size() != 2 || span[0] < 1 || span[1] < span[0] || span[0] != std::floor(span[0]) || span[1] != std::floor(span[1]))
    throw ConfigError(fmt::format("sustained probe: {} must be [first, last] request numbers (from 1)", what));
  if (static_cast<std::size_t>(span[1]) > n)
    throw ConfigError(fmt::format("sustained probe: {} [{}, {}] but the run has {} requests", what, span[0], span[1], n));
  return {static_cast<std::size_t>(span[0]) - 1, static_cast<std::size_t>(span[1]) - 1};
}

double rate_of(const SustainedRun& r, std::size_t i) {
  const double d = r.end_s[i] - r.first_token_s[i];
  if (!(d > 0)) throw ConfigError(fmt::format("sustained probe: request {} has no decode time", i + 1));
  return (r.output_tokens[i] - 1) / d;
}

double mean_rate(const SustainedRun& r, std::pair<std::size_t, std::size_t> s) {
  double sum = 0;
  for (std::size_t i = s.first; i <= s.second; ++i) sum += rate_of(r, i);
  return sum / static_cast<double>(s.second - s.first + 1);
}

double peak_rate(const SustainedRun& r) {
  double best = 0;
  for (std::size_t i = 0; i < r.end_s.size(); ++i) best = std::max(best, rate_of(r, i));
  return best;
}

// Time-weighted mean of a step series (value i holds on [t_i, t_{i+1}), the last to the run's end)
// over [from, to].
double step_mean(const std::vector<double>& t, const std::vector<double>& v, double from, double to) {
  if (t.empty() || !(to > from)) throw ConfigError(fmt::format("sustained probe: empty window [{}, {}]", from, to));
  if (to > t.back() + 1e-9)
    throw ConfigError(fmt::format("sustained probe: window [{}, {}] s ends after the run ({} s)", from, to, t.back()));
  double acc = 0;
  for (std::size_t i = 0; i < t.size(); ++i) {
    const double a = std::max(from, t[i]);
    const double b = std::min(to, i + 1 < t.size() ? t[i + 1] : t.back());
    if (b > a) acc += v[i] * (b - a);
  }
  return acc / (to - from);
}

// Linear interpolation of a sampled (not step) series at time x.
double sample_at(const std::vector<double>& t, const std::vector<double>& v, double x) {
  if (t.empty()) throw ConfigError("sustained probe: the run has no thermal series");
  if (x > t.back() + 1e-9) throw ConfigError(fmt::format("sustained probe: {} s is after the run's end ({} s)", x, t.back()));
  const auto it = std::upper_bound(t.begin(), t.end(), x);
  if (it == t.begin()) return v.front();
  if (it == t.end()) return v.back();
  const std::size_t i = static_cast<std::size_t>(it - t.begin());
  const double w = (x - t[i - 1]) / (t[i] - t[i - 1]);
  return v[i - 1] + w * (v[i] - v[i - 1]);
}

// The first sample at which the unit runs at its top clock: what comes before is the frequency governor's
// ramp from idle (schedutil starts a unit at its lowest point), not a thermal cap.
std::size_t first_at_top(const SustainedRun& r) {
  std::size_t i = 0;
  while (i < r.mhz.size() && r.mhz[i] < r.top_mhz) ++i;
  return i;
}

// Whether a trip caps the clocks at sample i (the series' throttled column; every sample when the run has
// none, as in a hand-made table): a clock the frequency governor lowers on an idle unit is no loss.
bool capped(const SustainedRun& r, std::size_t i) { return r.throttled.empty() || r.throttled[i] > 0.5; }

// The first sample, after the clock has reached its top, at which it is at its lowest point; npos if never.
std::size_t first_floor(const SustainedRun& r) {
  if (!(r.min_mhz < r.top_mhz)) return std::string::npos;
  for (std::size_t i = first_at_top(r); i < r.t_s.size(); ++i)
    if (capped(r, i) && r.mhz[i] <= r.min_mhz * (1 + 1e-9)) return i;
  return std::string::npos;
}

// Decode rate of the requests that end inside [from, to]: their tokens over their decode time.
double rate_in_window(const SustainedRun& r, double from, double to) {
  double tokens = 0, seconds = 0;
  for (std::size_t i = 0; i < r.end_s.size(); ++i)
    if (r.end_s[i] >= from && r.end_s[i] <= to) {
      tokens += r.output_tokens[i] - 1;
      seconds += r.end_s[i] - r.first_token_s[i];
    }
  if (!(seconds > 0)) throw ConfigError(fmt::format("sustained probe: no request ends in [{}, {}] s", from, to));
  return tokens / seconds;
}

void need_clock(const SustainedRun& r) {
  if (r.mhz.empty() || !(r.top_mhz > 0))
    throw ConfigError("sustained probe: the unit has no operating points in the phone's thermal: section (no clock series)");
}

std::vector<double> span_of(const YAML::Node& n, const char* key) {
  std::vector<double> out;
  if (!n.IsDefined() || n.IsNull()) return out;
  if (!n.IsSequence() || n.size() != 2) throw ConfigError(fmt::format("sustained probe: {} must be [a, b]", key));
  for (const auto& x : n) out.push_back(x.as<double>());
  return out;
}

}  // namespace

SustainedRun read_sustained_run(const std::string& h5_path, const std::string& unit, const std::string& scenario) {
  const h5::Reader r(h5_path);
  SustainedRun run;
  const std::string rec = "/runs/" + scenario + ".chat/records/";
  run.first_token_s = r.doubles(rec + "first_token_s");
  run.end_s = r.doubles(rec + "end_s");
  run.output_tokens = r.doubles(rec + "output_tokens");
  const std::string th = "/tables/thermal." + scenario + "/";
  run.t_s = read_or_empty(r, th + "t_s");
  run.junction_c = read_or_empty(r, th + "junction_c");
  run.skin_c = read_or_empty(r, th + "skin_c");
  run.power_w = read_or_empty(r, th + "soc_power_w");
  run.battery_percent = read_or_empty(r, th + "battery_percent");
  run.mhz = read_or_empty(r, th + unit + "_mhz");
  run.throttled = read_or_empty(r, th + "throttled");
  if (!run.mhz.empty()) {
    run.top_mhz = *std::max_element(run.mhz.begin(), run.mhz.end());
    run.min_mhz = *std::min_element(run.mhz.begin(), run.mhz.end());
  }
  return run;
}

double sustained_metric(const SustainedRun& r, const SustainedMetric& m) {
  const std::size_t n = r.end_s.size();
  if (n == 0) throw ConfigError("sustained probe: the run has no requests");
  const std::string& k = m.metric;
  if (k == "rate_ratio" || k == "rate") {
    const double num = mean_rate(r, request_span(m.requests_of, n, "requests_of"));
    if (k == "rate") return num;
    const double den = m.reference_peak ? peak_rate(r) : mean_rate(r, request_span(m.reference_requests, n, "reference"));
    return num / den;
  }
  if (k == "first_request_below") {
    const double peak = peak_rate(r);
    for (std::size_t i = 0; i < n; ++i)
      if (rate_of(r, i) < (1 - m.loss) * peak) return static_cast<double>(i + 1);
    return static_cast<double>(n + 1);  // none: after the run
  }
  if (k == "requests_before_floor") {
    need_clock(r);
    const std::size_t f = first_floor(r);
    const double floor_t = f == std::string::npos ? std::numeric_limits<double>::infinity() : r.t_s[f];
    double done = 0;
    for (std::size_t i = 0; i < n; ++i)
      if (r.end_s[i] <= floor_t) ++done;
    return done;
  }
  if (k == "junction_at_floor_c") {
    // The junction when the unit's clock first reaches its lowest point (the run's peak when it never does).
    need_clock(r);
    if (const std::size_t f = first_floor(r); f != std::string::npos) return r.junction_c[f];
    return *std::max_element(r.junction_c.begin(), r.junction_c.end());
  }
  if (k == "floor_mhz") {
    need_clock(r);
    return r.min_mhz;
  }
  if (k == "peak_junction_c" || k == "peak_skin_c") {
    const auto& v = k == "peak_junction_c" ? r.junction_c : r.skin_c;
    if (v.empty()) throw ConfigError("sustained probe: the run has no thermal series");
    return *std::max_element(v.begin(), v.end());
  }
  if (k == "junction_max_mean") {
    const auto s = request_span(m.requests_of, n, "requests_of");
    double sum = 0;
    for (std::size_t i = s.first; i <= s.second; ++i) {
      const double from = i == 0 ? 0.0 : r.end_s[i - 1], to = r.end_s[i];
      double best = std::max(sample_at(r.t_s, r.junction_c, from), sample_at(r.t_s, r.junction_c, to));
      for (std::size_t j = 0; j < r.t_s.size(); ++j)
        if (r.t_s[j] >= from && r.t_s[j] <= to) best = std::max(best, r.junction_c[j]);
      sum += best;
    }
    return sum / static_cast<double>(s.second - s.first + 1);
  }
  if (k == "heating_rate") {
    if (!(m.window_s > 0)) throw ConfigError("sustained probe: heating_rate needs window_s > 0");
    return (sample_at(r.t_s, r.junction_c, m.window_s) - sample_at(r.t_s, r.junction_c, 0)) / m.window_s;
  }
  if (k == "time_to_loss" || k == "minute_of_loss") {
    need_clock(r);
    double t = r.end_time_s();
    // From the first time the clock is at its top: the frequency governor's ramp at the start is no loss.
    for (std::size_t i = first_at_top(r); i < r.t_s.size(); ++i)
      if (capped(r, i) && r.mhz[i] < (1 - m.loss) * r.top_mhz) {
        t = r.t_s[i];
        break;
      }
    return k == "time_to_loss" ? t : std::floor(t / 60.0) + 1;
  }
  if (k == "clock_ratio") {
    need_clock(r);
    if (m.window.size() != 2 || m.reference_window.size() != 2)
      throw ConfigError("sustained probe: clock_ratio needs window and reference_window [from_s, to_s]");
    return step_mean(r.t_s, r.mhz, m.window[0], m.window[1]) /
           step_mean(r.t_s, r.mhz, m.reference_window[0], m.reference_window[1]);
  }
  if (k == "window_rate_ratio") {
    if (m.window.size() != 2 || m.reference_window.size() != 2)
      throw ConfigError("sustained probe: window_rate_ratio needs window and reference_window [from_s, to_s]");
    const double end = std::max(r.end_s.back(), r.end_time_s());
    if (m.window[1] > end + 1e-9)
      throw ConfigError(fmt::format("sustained probe: window ends at {} s, after the run ({} s)", m.window[1], end));
    return rate_in_window(r, m.window[0], m.window[1]) / rate_in_window(r, m.reference_window[0], m.reference_window[1]);
  }
  if (k == "mean_power_w") {
    // From the battery's charge, which integrates the power exactly (the series' power column is the
    // value at each sample instant, between two decode steps as often as during one).
    const double from = m.window.size() == 2 ? m.window[0] : 0.0;
    const double to = m.window.size() == 2 ? m.window[1] : r.end_time_s();
    if (!(r.battery_capacity_j > 0)) throw ConfigError("sustained probe: mean_power_w needs the phone's battery capacity");
    if (!(to > from)) throw ConfigError(fmt::format("sustained probe: empty window [{}, {}]", from, to));
    const double drop = sample_at(r.t_s, r.battery_percent, from) - sample_at(r.t_s, r.battery_percent, to);
    return drop / 100.0 * r.battery_capacity_j / (to - from);
  }
  if (k == "battery_drop_pct") {
    if (r.battery_percent.empty()) throw ConfigError("sustained probe: the run has no battery series");
    return r.battery_percent.front() - r.battery_percent.back();
  }
  throw ConfigError(fmt::format("sustained probe: unknown metric '{}' (known: {})", k, fmt::join(kMetrics, ", ")));
}

ParamSchema SustainedProbe::schema() {
  ParamSchema s;
  s.text("device", std::nullopt, "built-in device profile with a thermal: section");
  s.text("engine", std::string(""), "engine profile (\"\": the experiment's default)");
  s.text("unit", std::nullopt, "compute unit that prefills and decodes");
  s.text_list("extra_units", std::vector<std::string>{}, "units loaded at the same time by one more chat app each "
                                                         "(a game or benchmark loading CPU and GPU together)");
  s.text("model", std::nullopt, "built-in model profile");
  s.text("dtype", std::string("int4"), "weight dtype of the published run");
  s.integer("requests", 1, "back-to-back requests (1 with many output tokens: a continuous decode)").range(1, 1 << 20);
  s.integer("prompt_tokens", 128, "prompt tokens per request").range(1, 1 << 20);
  s.integer("output_tokens", 512, "tokens decoded per request").range(2, 1 << 24);
  s.real("gap_s", 0.0, "idle time between two requests").non_negative().with_unit("s");
  s.real("ambient_c", 25.0, "ambient temperature the source states (or 25 C)").with_unit("C");
  s.text("start", std::string("cold"), "cold (at ambient) or warm (at warm_c)").in({"cold", "warm"});
  s.real("warm_c", 40.0, "junction and skin temperature of a warm start").with_unit("C");
  s.text("governor", std::string("schedutil"), "frequency governor").in({"schedutil", "performance", "powersave"});
  s.text("metric", std::nullopt, "what to read (sustained_probe.h)").in(kMetrics);
  s.node("requests_of", "[a, b]: the requests a rate metric averages");
  s.node("reference", "[a, b] (their mean rate) or peak (the best request)");
  s.node("window", "[from_s, to_s] of a clock_ratio / mean_power_w");
  s.node("reference_window", "[from_s, to_s] a clock_ratio divides by");
  s.real("loss", 0.1, "fraction below the top (time_to_loss, minute_of_loss, first_request_below)").range(0, 1);
  s.real("window_s", 0.0, "heating_rate: seconds from the start").non_negative().with_unit("s");
  s.real("min_duration_s", 0.0, "repeat the requests until the run lasts at least this long (the source's loop "
                                "ran that long; mobisim's may be faster)").non_negative().with_unit("s");
  return s;
}

SustainedProbe::SustainedProbe(const Params& p) {
  device_ = p.text("device");
  engine_ = p.text("engine");
  unit_ = p.text("unit");
  extra_units_ = p.text_list("extra_units");
  model_ = p.text("model");
  dtype_ = p.text("dtype");
  requests_ = p.integer("requests");
  prompt_tokens_ = p.integer("prompt_tokens");
  output_tokens_ = p.integer("output_tokens");
  gap_s_ = p.real("gap_s");
  ambient_c_ = p.real("ambient_c");
  start_ = p.text("start");
  warm_c_ = p.real("warm_c");
  governor_ = p.text("governor");
  m_.metric = p.text("metric");
  m_.loss = p.real("loss");
  m_.window_s = p.real("window_s");
  min_duration_s_ = p.real("min_duration_s");
  try {
    m_.requests_of = span_of(p.node("requests_of"), "requests_of");
    const YAML::Node ref = p.node("reference");
    if (ref.IsDefined() && ref.IsScalar()) {
      if (ref.Scalar() != "peak") p.fail("reference", "expected [a, b] or peak");
      m_.reference_peak = true;
    } else {
      m_.reference_requests = span_of(ref, "reference");
    }
    m_.window = span_of(p.node("window"), "window");
    m_.reference_window = span_of(p.node("reference_window"), "reference_window");
  } catch (const YAML::Exception& e) {
    p.fail("requests_of", fmt::format("expected numbers ({})", e.what()));
  }
  if ((m_.metric == "rate_ratio" || m_.metric == "rate" || m_.metric == "junction_max_mean") && m_.requests_of.empty())
    p.fail("requests_of", fmt::format("metric {} needs requests_of: [a, b]", m_.metric));
  if (m_.metric == "rate_ratio" && !m_.reference_peak && m_.reference_requests.empty())
    p.fail("reference", "metric rate_ratio needs reference: [a, b] or peak");
  if ((m_.metric == "clock_ratio" || m_.metric == "window_rate_ratio") && (m_.window.empty() || m_.reference_window.empty()))
    p.fail("window", "metric clock_ratio needs window and reference_window");
  if (m_.metric == "heating_rate" && !(m_.window_s > 0)) p.fail("window_s", "metric heating_rate needs window_s > 0");
}

YAML::Node SustainedProbe::experiment(const std::vector<std::string>& overrides, const std::string& output) const {
  YAML::Node root(YAML::NodeType::Map);
  root["name"] = "fidelity_sustained";
  root["seed"] = 1;
  root["output"] = output;
  YAML::Node e(YAML::NodeType::Map);
  e["impl"] = "phone";
  e["device"] = device_;
  e["engine"] = engine_.empty() ? std::string(devices::kDefaultEngine) : engine_;
  YAML::Node scen(YAML::NodeType::Sequence);
  scen.push_back("shared");
  e["scenarios"] = scen;
  YAML::Node th(YAML::NodeType::Map);
  th["start"] = start_;
  th["ambient_c"] = ambient_c_;
  th["warm_c"] = warm_c_;
  th["governor"] = governor_;
  e["thermal"] = th;
  YAML::Node app(YAML::NodeType::Map);
  app["impl"] = "chat";
  app["label"] = "chat";
  app["priority"] = "foreground";
  YAML::Node model(YAML::NodeType::Map);
  model["base"] = model_;
  model["weight_dtype"] = dtype_;
  model["activation_dtype"] = "fp16";
  model["kv_dtype"] = "fp16";
  app["model"] = model;
  app["unit"] = unit_;
  app["requests"] = requests_;
  app["prompt_tokens"] = prompt_tokens_;
  app["output_tokens"] = output_tokens_;
  app["think_time_s"] = gap_s_;
  app["keep_history"] = false;  // every request a fresh prompt, as the benchmarks' loops
  YAML::Node apps(YAML::NodeType::Sequence);
  apps.push_back(app);
  for (const auto& u : extra_units_) {
    YAML::Node extra = yaml_clone(app);
    extra["label"] = "load_" + u;
    extra["unit"] = u;
    apps.push_back(extra);
  }
  e["apps"] = apps;
  root["experiment"] = e;
  for (const auto& o : overrides) {
    if (o.starts_with("device.") || o.starts_with("engine.") || o.starts_with("thermal."))
      apply_override(root, "experiment." + o);
    else
      throw ConfigError(fmt::format("sustained probe: override '{}' must start with device., engine. or thermal.", o));
  }
  return root;
}

double SustainedProbe::evaluate(const ProbeContext& context) const {
  static std::atomic<std::uint64_t> counter{0};
  const fs::path dir = fs::temp_directory_path() / "mobisim-sustained-probe";
  fs::create_directories(dir);
  const std::string stem = fmt::format("run-{}-{}-{}", ::getpid(), std::hash<std::thread::id>()(std::this_thread::get_id()),
                                       counter.fetch_add(1));
  const fs::path out = dir / (stem + ".h5");
  struct Cleanup {
    fs::path h5;
    ~Cleanup() {
      std::error_code ec;
      fs::remove(h5, ec);
      fs::remove(fs::path(h5).replace_extension(".csv"), ec);
      fs::remove(fs::path(h5).replace_filename(h5.stem().string() + "_summary.csv"), ec);
    }
  } cleanup{out};
  experiments::RunOptions o;
  o.quiet = true;
  o.no_plot = true;
  o.output_override = out.string();
  std::int64_t requests = requests_;
  for (int attempt = 0;; ++attempt) {
    YAML::Node root = experiment(context.overrides, out.string());
    for (std::size_t a = 0; a < root["experiment"]["apps"].size(); ++a) root["experiment"]["apps"][a]["requests"] = requests;
    const YAML::Node device = yaml_clone(root["experiment"]["device"]);
    const int rc = experiments::run_experiment(root, "sustained probe (" + device_ + ")", o);
    if (rc != 0) throw ConfigError(fmt::format("sustained probe: the phone run failed (exit {})", rc));
    SustainedRun run = read_sustained_run(out.string(), unit_);
    if (min_duration_s_ > 0 && run.end_time_s() < min_duration_s_ && attempt < 4) {
      // Deterministic: the same inputs always give the same request count.
      requests = static_cast<std::int64_t>(std::ceil(static_cast<double>(requests) * min_duration_s_ /
                                                     std::max(run.end_time_s(), 1e-3))) + 1;
      continue;
    }
    const devices::DeviceProfile profile =
        devices::load_device_profile(device, ConfigSource{std::make_shared<std::string>("sustained probe"), ""});
    run.battery_capacity_j = profile.battery ? profile.battery->joules() : 0;
    return sustained_metric(run, m_);
  }
}

bool device_thermal_inherits_from(const std::string& device, const std::string& preset) {
  std::string current = device;
  for (int depth = 0; depth < 16 && !current.empty(); ++depth) {
    std::string text, origin;
    if (!find_config("devices", current, text, origin)) return false;
    const YAML::Node root = load_yaml_string(text, origin);
    if (!root.IsMap()) return false;
    const YAML::Node th = root["thermal"];
    if (th.IsDefined() && th.IsMap() && th["base"].IsDefined() && th["base"].IsScalar()) {
      std::string t = th["base"].Scalar();
      for (int d = 0; d < 16 && !t.empty(); ++d) {
        if (t == preset) return true;
        std::string ttext, torigin;
        if (!find_config("thermal", t, ttext, torigin)) return false;
        const YAML::Node troot = load_yaml_string(ttext, torigin);
        t = troot.IsMap() && troot["base"].IsDefined() && troot["base"].IsScalar() ? troot["base"].Scalar() : "";
      }
      return false;
    }
    if (th.IsDefined() && th.IsScalar()) return false;  // thermal: none
    const YAML::Node base = root["base"];
    current = base.IsDefined() && base.IsScalar() ? base.Scalar() : std::string();
  }
  return false;
}

MOBISIM_REGISTER(Probe, SustainedProbe, "sustained",
                 "A phone run (one chat app, thermal model on) and one sustained-use quantity of it.");

}  // namespace mobisim::fidelity
