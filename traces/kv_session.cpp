#include "traces/kv_session.h"

#include "traces/kv_stream.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "sim/error.h"
#include "sim/h5.h"
#include "sim/rng.h"

namespace mobisim::traces {

namespace {
constexpr const char* kFormat = "mobisim-kv-session";
constexpr std::int64_t kSchemaVersion = 1;

std::string table_name(int i) { return fmt::format("t{:05d}", i); }
std::string query_name(int i) { return fmt::format("q{:05d}", i); }

void expect_shape(const kernel::Mat& m, Eigen::Index rows, Eigen::Index cols, const std::string& where,
                  const std::string& what) {
  if (m.rows() != rows || m.cols() != cols)
    throw InputError(fmt::format("{}: {} has shape [{}, {}], expected [{}, {}]", where, what, m.rows(), m.cols(), rows,
                                 cols));
}
}  // namespace

void KvSession::validate(const std::string& where) const {
  if (n_layers <= 0 || n_kv_heads <= 0 || n_heads <= 0 || head_dim <= 0 || prefill <= 0 || decode < 0)
    throw InputError(fmt::format("{}: n_layers, n_kv_heads, n_heads, head_dim and prefill must be positive and "
                                 "decode non-negative (got {}, {}, {}, {}, {}, {})",
                                 where, n_layers, n_kv_heads, n_heads, head_dim, prefill, decode));
  if (n_heads % n_kv_heads != 0)
    throw InputError(fmt::format("{}: n_heads {} is not a multiple of n_kv_heads {}", where, n_heads, n_kv_heads));
  if (static_cast<int>(keys.size()) != tables() || static_cast<int>(values.size()) != tables())
    throw InputError(fmt::format("{}: {} key and {} value tables, expected {}", where, keys.size(), values.size(), tables()));
  if (static_cast<int>(queries.size()) != n_layers * n_heads)
    throw InputError(fmt::format("{}: {} query tables, expected {}", where, queries.size(), n_layers * n_heads));
  for (int i = 0; i < tables(); ++i) {
    expect_shape(keys[i], positions(), head_dim, where, "keys/" + table_name(i));
    expect_shape(values[i], positions(), head_dim, where, "values/" + table_name(i));
  }
  for (int i = 0; i < n_layers * n_heads; ++i) expect_shape(queries[i], decode, head_dim, where, "queries/" + query_name(i));
}

KvSession capture_kv_session(const kernel::Model& m, const std::vector<int>& tokens, int prefill) {
  const kernel::Config& c = m.config;
  const int n = static_cast<int>(tokens.size());
  if (prefill <= 0 || prefill > n || n > c.seq_len)
    throw InputError(fmt::format("capture: prefill {} and {} tokens must satisfy 0 < prefill <= tokens <= seq_len {}",
                                 prefill, n, c.seq_len));
  kernel::KVCache cache(c);
  kernel::RunState st;
  kernel::Capture cap;
  kernel::ForwardOptions o;
  o.logits = kernel::Logits::kNone;
  o.capture = &cap;
  kernel::forward(m, cache, st, tokens, o);
  KvSession s;
  s.source = fmt::format("capture({})", m.source);
  s.n_layers = c.n_layers;
  s.n_kv_heads = c.n_kv_heads;
  s.n_heads = c.n_heads;
  s.head_dim = c.head_dim;
  s.prefill = prefill;
  s.decode = n - prefill;
  for (int l = 0; l < c.n_layers; ++l)
    for (int h = 0; h < c.n_kv_heads; ++h) {
      s.keys.push_back(cap.k[l].block(0, h * c.head_dim, n, c.head_dim));
      s.values.push_back(cap.v[l].block(0, h * c.head_dim, n, c.head_dim));
    }
  for (int l = 0; l < c.n_layers; ++l)
    for (int h = 0; h < c.n_heads; ++h) s.queries.push_back(cap.q[l].block(prefill, h * c.head_dim, n - prefill, c.head_dim));
  s.validate("capture");
  return s;
}

void DriftingSpec::validate() const {
  if (n_layers <= 0 || n_kv_heads <= 0 || group <= 0 || head_dim <= 0 || prefill <= 0 || decode < 0 ||
      initial_centres <= 0 || birth_every <= 0 || recent_centres <= 0)
    throw ConfigError("drifting session: layer, head, dimension, length, centre and period counts must be positive");
  for (double p : {p_recent, p_query_local, query_head_correlation, query_persistence})
    if (!(p >= 0 && p <= 1)) throw ConfigError(fmt::format("drifting session: probability {} outside [0, 1]", p));
  for (double x : {centre_scale, drift_per_step, key_noise, split_offset, query_gain, query_noise})
    if (!(x >= 0) || !std::isfinite(x)) throw ConfigError(fmt::format("drifting session: scale {} must be >= 0", x));
}

namespace {
struct Centre {
  Eigen::VectorXf base, velocity;
  int born = 0;  // decode step the centre appeared (0 for initial ones)
  Eigen::VectorXf at(int step) const { return base + velocity * static_cast<float>(step - born); }
  // gain x at(step) + noise into out[0, d), element by element as Eigen evaluates it (at(step)
  // first; a gain of 1 changes no bit), without at()'s temporary: a position draws several rows.
  void at_plus(int step, float gain, const float* noise, float* out) const {
    const float dt = static_cast<float>(step - born);
    for (Eigen::Index i = 0; i < base.size(); ++i) {
      const float c = base[i] + velocity[i] * dt;
      out[i] = gain * c + noise[i];
    }
  }
};

void gaussian_into(sim::Rng& rng, int d, double sd, float* out) {
  for (int i = 0; i < d; ++i) out[i] = static_cast<float>(rng.normal(0.0, sd));
}

Eigen::VectorXf gaussian(sim::Rng& rng, int d, double sd) {
  Eigen::VectorXf v(d);
  gaussian_into(rng, d, sd, v.data());
  return v;
}

// Advances `rng` exactly as gaussian(rng, d, .) would, without the logarithms and square roots.
// Every normal draw of the generator comes in a vector of d, so with d even no spare normal is ever
// pending between vectors and d draws are d / 2 accepted pairs of the polar method's uniforms.
void skip_gaussian(sim::Rng& rng, int d) {
  if (d % 2 != 0) {
    gaussian(rng, d, 1.0);
    return;
  }
  for (int i = 0; i < d / 2; ++i) {
    double u, v, s;
    do {
      u = 2.0 * rng.uniform() - 1.0;
      v = 2.0 * rng.uniform() - 1.0;
      s = u * u + v * v;
    } while (s >= 1.0 || s == 0.0);
  }
}
}  // namespace

// One (layer, KV head) of the drifting generator: its two random streams and its centres, drawn a
// position at a time (positions in order). The whole generator and the stream both draw through it.
class DriftingTable {
 public:
  DriftingTable(const DriftingSpec& spec, int layer, int kv_head)
      : spec_(spec),
        rng_(spec.seed, 0, "traces/kv_session", fmt::format("l{}h{}", layer, kv_head)),
        // Queries draw from their own stream, so the keys of a (layer, KV head) are the same whatever
        // the GQA group size and query parameters (models that differ only there share their keys).
        qrng_(spec.seed, 0, "traces/kv_session", fmt::format("l{}h{}/queries", layer, kv_head)),
        targets_(static_cast<std::size_t>(spec.group), -1) {
    const int d = spec.head_dim;
    for (int i = 0; i < spec.initial_centres; ++i)
      centres_.push_back({gaussian(rng_, d, spec.centre_scale), gaussian(rng_, d, spec.drift_per_step), 0});
  }

  // Position p's key into `key` (head_dim floats), its value into `value` (nullptr: drawn, not
  // kept) and, at a decode position, the group's queries into queries[g].
  void draw(int p, float* key, float* value, float* const* queries) {
    const DriftingSpec& spec = spec_;
    const int d = spec.head_dim;
    const int step = std::max(0, p - spec.prefill);
    if (p >= spec.prefill && step > 0 && step % spec.birth_every == 0) {
      const Centre& parent = centres_[rng_.uniform_int(centres_.size())];
      Eigen::VectorXf dir = gaussian(rng_, d, 1.0);
      dir *= static_cast<float>(spec.split_offset / std::max(1e-12f, dir.norm()));
      centres_.push_back({parent.at(step) + dir, gaussian(rng_, d, spec.drift_per_step), step});
    }
    int pick;
    if (p < spec.prefill) {
      pick = static_cast<int>(rng_.uniform_int(static_cast<std::uint64_t>(spec.initial_centres)));
    } else if (rng_.bernoulli(spec.p_recent)) {
      const int r = std::min<int>(spec.recent_centres, static_cast<int>(centres_.size()));
      pick = static_cast<int>(centres_.size()) - 1 - static_cast<int>(rng_.uniform_int(r));
    } else {
      pick = static_cast<int>(rng_.uniform_int(centres_.size()));
    }
    noise_.resize(static_cast<std::size_t>(d));
    gaussian_into(rng_, d, spec.key_noise, noise_.data());
    centres_[pick].at_plus(step, 1.0f, noise_.data(), key);
    if (value)
      gaussian_into(rng_, d, 1.0, value);
    else
      skip_gaussian(rng_, d);
    if (p < spec.prefill) return;
    for (int g = 0; g < spec.group; ++g) {
      int& target = targets_[g];
      if (g > 0 && qrng_.bernoulli(spec.query_head_correlation))
        target = targets_[0];
      else if (target < 0 || !qrng_.bernoulli(spec.query_persistence))
        target = qrng_.bernoulli(spec.p_query_local) ? pick : static_cast<int>(qrng_.uniform_int(centres_.size()));
      gaussian_into(qrng_, d, spec.query_noise, noise_.data());
      centres_[target].at_plus(step, static_cast<float>(spec.query_gain), noise_.data(), queries[g]);
    }
  }

 private:
  DriftingSpec spec_;
  sim::Rng rng_, qrng_;
  std::vector<Centre> centres_;
  std::vector<int> targets_;  // each query head's centre at the last step
  std::vector<float> noise_;  // scratch: the noise of the row being drawn
};

KvSession generate_drifting_session(const DriftingSpec& spec) {
  spec.validate();
  KvSession s;
  s.source = fmt::format("drifting(seed={})", spec.seed);
  s.n_layers = spec.n_layers;
  s.n_kv_heads = spec.n_kv_heads;
  s.n_heads = spec.n_kv_heads * spec.group;
  s.head_dim = spec.head_dim;
  s.prefill = spec.prefill;
  s.decode = spec.decode;
  const int d = spec.head_dim, n = s.positions();
  s.queries.resize(static_cast<std::size_t>(s.n_layers) * s.n_heads);
  for (int l = 0; l < spec.n_layers; ++l)
    for (int h = 0; h < spec.n_kv_heads; ++h) {
      DriftingTable gen(spec, l, h);
      kernel::Mat k(n, d), v(n, d);
      std::vector<kernel::Mat*> qs;
      for (int g = 0; g < spec.group; ++g) {
        auto& q = s.queries[static_cast<std::size_t>(l) * s.n_heads + h * spec.group + g];
        q.resize(spec.decode, d);
        qs.push_back(&q);
      }
      std::vector<float*> qrows(qs.size());
      for (int p = 0; p < n; ++p) {
        for (std::size_t g = 0; g < qs.size(); ++g)
          qrows[g] = p >= spec.prefill ? qs[g]->row(p - spec.prefill).data() : nullptr;
        gen.draw(p, k.row(p).data(), v.row(p).data(), qrows.data());
      }
      s.keys.push_back(std::move(k));
      s.values.push_back(std::move(v));
    }
  s.validate("drifting session");
  return s;
}

// ---------------------------------------------------------------------------
// Streams
// ---------------------------------------------------------------------------
namespace {
KvShape shape_of(const KvSession& s) {
  return {s.source, s.n_layers, s.n_kv_heads, s.n_heads, s.head_dim, s.prefill, s.decode};
}
}  // namespace

SessionStream::SessionStream(const KvSession& s, const std::string& where) : s_(s) {
  s.validate(where);
  shape_ = shape_of(s);
}

KeyRows SessionStream::key_rows(int table, int first, int count) const {
  return KeyRows(s_.keys[table].row(first).data(), count, s_.head_dim);
}

const float* SessionStream::query(int head, int step) const { return s_.queries[head].row(step).data(); }

// A table's generator and the rows drawn and not yet forgotten: keys of positions
// [key_base, drawn), queries of steps [query_base, drawn - prefill), group rows per step.
struct DriftingStream::Table {
  DriftingTable gen;
  std::vector<float> keys, queries;
  int key_base = 0, query_base = 0;
};

DriftingStream::DriftingStream(const DriftingSpec& spec, bool keep_keys) : keep_keys_(keep_keys) {
  spec.validate();
  shape_ = {fmt::format("drifting(seed={})", spec.seed), spec.n_layers, spec.n_kv_heads, spec.n_kv_heads * spec.group,
            spec.head_dim, spec.prefill, spec.decode};
  tables_.reserve(static_cast<std::size_t>(shape_.tables()));
  for (int l = 0; l < spec.n_layers; ++l)
    for (int h = 0; h < spec.n_kv_heads; ++h) {
      tables_.push_back({DriftingTable(spec, l, h), {}, {}, 0, 0});
      // Kept keys never move (key_rows hands out pointers into them).
      if (keep_keys) tables_.back().keys.reserve(static_cast<std::size_t>(shape_.positions()) * spec.head_dim);
    }
}

DriftingStream::~DriftingStream() = default;

void DriftingStream::ensure(int end) {
  const int target = shape_.prefill + std::clamp(end, 0, shape_.decode);
  if (target <= drawn_) return;
  const std::size_t d = static_cast<std::size_t>(shape_.head_dim), group = static_cast<std::size_t>(shape_.group());
  std::vector<float*> qrows(group);
  for (auto& t : tables_) {
    t.keys.resize(static_cast<std::size_t>(target - t.key_base) * d);
    if (target > shape_.prefill)
      t.queries.resize(static_cast<std::size_t>(target - shape_.prefill - t.query_base) * group * d);
    for (int p = drawn_; p < target; ++p) {
      const int step = p - shape_.prefill;
      for (std::size_t g = 0; g < group; ++g)
        qrows[g] = step >= 0 ? t.queries.data() + (static_cast<std::size_t>(step - t.query_base) * group + g) * d : nullptr;
      t.gen.draw(p, t.keys.data() + static_cast<std::size_t>(p - t.key_base) * d, nullptr, qrows.data());
    }
  }
  drawn_ = target;
}

void DriftingStream::release(int step) {
  // Forgotten rows are erased once they are at least half of what is held (amortised O(1) a row).
  auto drop = [](std::vector<float>& rows, int& base, int upto, std::size_t row_floats) {
    const std::size_t gone = static_cast<std::size_t>(std::max(0, upto - base)) * row_floats;
    if (gone == 0 || 2 * gone < rows.size()) return;
    rows.erase(rows.begin(), rows.begin() + static_cast<std::ptrdiff_t>(gone));
    base = upto;
  };
  const std::size_t d = static_cast<std::size_t>(shape_.head_dim);
  const int upto = std::clamp(step, 0, std::max(0, drawn_ - shape_.prefill));
  for (auto& t : tables_) {
    drop(t.queries, t.query_base, upto, d * static_cast<std::size_t>(shape_.group()));
    if (!keep_keys_) drop(t.keys, t.key_base, shape_.prefill + upto, d);
  }
}

void DriftingStream::extend(int decode) {
  if (decode <= shape_.decode) return;
  if (keep_keys_) throw Error("drifting stream: a stream that keeps its keys cannot be extended");
  shape_.decode = decode;
}

KeyRows DriftingStream::key_rows(int table, int first, int count) const {
  const Table& t = tables_[table];
  if (first < t.key_base || first + count > drawn_)
    throw Error(fmt::format("drifting stream: keys [{}, {}) of table {} not held (held [{}, {}))", first, first + count,
                            table, t.key_base, drawn_));
  return KeyRows(t.keys.data() + static_cast<std::size_t>(first - t.key_base) * shape_.head_dim, count, shape_.head_dim);
}

const float* DriftingStream::query(int head, int step) const {
  const int group = shape_.group();
  const int layer = head / shape_.n_heads, in_layer = head % shape_.n_heads;
  const Table& t = tables_[static_cast<std::size_t>(layer) * shape_.n_kv_heads + in_layer / group];
  if (step < t.query_base || step >= drawn_ - shape_.prefill)
    throw Error(fmt::format("drifting stream: query of step {} not held", step));
  return t.queries.data() +
         (static_cast<std::size_t>(step - t.query_base) * group + static_cast<std::size_t>(in_layer % group)) *
             shape_.head_dim;
}

void write_kv_session(const KvSession& s, const std::string& path) {
  s.validate(path);
  h5::Writer w(path);
  H5::Group root = w.root();
  h5::write_attr(root, "format", kFormat);
  h5::write_attr(root, "schema_version", kSchemaVersion);
  h5::write_attr(root, "source", s.source);
  h5::write_attr(root, "n_layers", static_cast<std::int64_t>(s.n_layers));
  h5::write_attr(root, "n_kv_heads", static_cast<std::int64_t>(s.n_kv_heads));
  h5::write_attr(root, "n_heads", static_cast<std::int64_t>(s.n_heads));
  h5::write_attr(root, "head_dim", static_cast<std::int64_t>(s.head_dim));
  h5::write_attr(root, "prefill", static_cast<std::int64_t>(s.prefill));
  h5::write_attr(root, "decode", static_cast<std::int64_t>(s.decode));
  auto put = [](const H5::Group& g, const std::string& name, const kernel::Mat& m) {
    h5::write_matrix(g, name, std::vector<float>(m.data(), m.data() + m.size()), m.rows(), m.cols());
  };
  H5::Group keys = w.group("keys"), values = w.group("values"), queries = w.group("queries");
  for (int i = 0; i < s.tables(); ++i) {
    put(keys, table_name(i), s.keys[i]);
    put(values, table_name(i), s.values[i]);
  }
  for (int i = 0; i < s.n_layers * s.n_heads; ++i) put(queries, query_name(i), s.queries[i]);
  w.commit();
}

KvSession read_kv_session(const std::string& path) {
  h5::Reader r(path);
  if (!r.has_attr("/", "format") || r.attr_string("/", "format") != kFormat)
    throw InputError(fmt::format("{}: not a KV session (root attribute format must be '{}')", path, kFormat));
  if (r.attr_int("/", "schema_version") != kSchemaVersion)
    throw InputError(fmt::format("{}: schema_version {} is not supported (expected {})", path,
                                 r.attr_int("/", "schema_version"), kSchemaVersion));
  KvSession s;
  s.source = r.attr_string("/", "source");
  s.n_layers = static_cast<int>(r.attr_int("/", "n_layers"));
  s.n_kv_heads = static_cast<int>(r.attr_int("/", "n_kv_heads"));
  s.n_heads = static_cast<int>(r.attr_int("/", "n_heads"));
  s.head_dim = static_cast<int>(r.attr_int("/", "head_dim"));
  s.prefill = static_cast<int>(r.attr_int("/", "prefill"));
  s.decode = static_cast<int>(r.attr_int("/", "decode"));
  if (s.n_layers <= 0 || s.n_kv_heads <= 0 || s.n_heads <= 0 || s.head_dim <= 0 || s.prefill <= 0 || s.decode < 0 ||
      s.n_heads % s.n_kv_heads != 0)
    throw InputError(fmt::format("{}: inconsistent root attributes (layers {}, kv heads {}, heads {}, head_dim {}, "
                                 "prefill {}, decode {})",
                                 path, s.n_layers, s.n_kv_heads, s.n_heads, s.head_dim, s.prefill, s.decode));
  auto get = [&](const std::string& object, int rows) {
    std::size_t nr = 0, nc = 0;
    const auto data = r.matrix(object, nr, nc);
    if (static_cast<int>(nr) != rows || static_cast<int>(nc) != s.head_dim)
      throw InputError(fmt::format("{}: {} has shape [{}, {}], expected [{}, {}]", path, object, nr, nc, rows, s.head_dim));
    return kernel::Mat(Eigen::Map<const kernel::Mat>(data.data(), rows, s.head_dim));
  };
  for (int i = 0; i < s.tables(); ++i) {
    s.keys.push_back(get("keys/" + table_name(i), s.positions()));
    s.values.push_back(get("values/" + table_name(i), s.positions()));
  }
  for (int i = 0; i < s.n_layers * s.n_heads; ++i) s.queries.push_back(get("queries/" + query_name(i), s.decode));
  s.validate(path);
  return s;
}

}  // namespace mobisim::traces
