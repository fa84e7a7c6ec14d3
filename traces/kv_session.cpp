#include "traces/kv_session.h"

#include <fmt/format.h>

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
};

Eigen::VectorXf gaussian(sim::Rng& rng, int d, double sd) {
  Eigen::VectorXf v(d);
  for (int i = 0; i < d; ++i) v[i] = static_cast<float>(rng.normal(0.0, sd));
  return v;
}
}  // namespace

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
      sim::Rng rng(spec.seed, 0, "traces/kv_session", fmt::format("l{}h{}", l, h));
      // Queries draw from their own stream, so the keys of a (layer, KV head) are the same whatever
      // the GQA group size and query parameters (models that differ only there share their keys).
      sim::Rng qrng(spec.seed, 0, "traces/kv_session", fmt::format("l{}h{}/queries", l, h));
      std::vector<Centre> centres;
      for (int i = 0; i < spec.initial_centres; ++i)
        centres.push_back({gaussian(rng, d, spec.centre_scale), gaussian(rng, d, spec.drift_per_step), 0});
      kernel::Mat k(n, d), v(n, d);
      std::vector<kernel::Mat*> qs;
      for (int g = 0; g < spec.group; ++g) {
        auto& q = s.queries[static_cast<std::size_t>(l) * s.n_heads + h * spec.group + g];
        q.resize(spec.decode, d);
        qs.push_back(&q);
      }
      std::vector<int> targets(static_cast<std::size_t>(spec.group), -1);  // each query head's centre at the last step
      for (int p = 0; p < n; ++p) {
        const int step = std::max(0, p - spec.prefill);
        if (p >= spec.prefill && step > 0 && step % spec.birth_every == 0) {
          const Centre& parent = centres[rng.uniform_int(centres.size())];
          Eigen::VectorXf dir = gaussian(rng, d, 1.0);
          dir *= static_cast<float>(spec.split_offset / std::max(1e-12f, dir.norm()));
          centres.push_back({parent.at(step) + dir, gaussian(rng, d, spec.drift_per_step), step});
        }
        int pick;
        if (p < spec.prefill) {
          pick = static_cast<int>(rng.uniform_int(static_cast<std::uint64_t>(spec.initial_centres)));
        } else if (rng.bernoulli(spec.p_recent)) {
          const int r = std::min<int>(spec.recent_centres, static_cast<int>(centres.size()));
          pick = static_cast<int>(centres.size()) - 1 - static_cast<int>(rng.uniform_int(r));
        } else {
          pick = static_cast<int>(rng.uniform_int(centres.size()));
        }
        k.row(p) = (centres[pick].at(step) + gaussian(rng, d, spec.key_noise)).transpose();
        v.row(p) = gaussian(rng, d, 1.0).transpose();
        if (p >= spec.prefill) {
          for (int g = 0; g < spec.group; ++g) {
            int& target = targets[g];
            if (g > 0 && qrng.bernoulli(spec.query_head_correlation))
              target = targets[0];
            else if (target < 0 || !qrng.bernoulli(spec.query_persistence))
              target = qrng.bernoulli(spec.p_query_local) ? pick : static_cast<int>(qrng.uniform_int(centres.size()));
            qs[g]->row(step) = (static_cast<float>(spec.query_gain) * centres[target].at(step) +
                                gaussian(qrng, d, spec.query_noise))
                                   .transpose();
          }
        }
      }
      s.keys.push_back(std::move(k));
      s.values.push_back(std::move(v));
    }
  s.validate("drifting session");
  return s;
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
