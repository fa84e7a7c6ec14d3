#include "models/kernel/trace.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "models/kernel/oracles.h"
#include "sim/error.h"
#include "sim/h5.h"

namespace mobisim::kernel {

std::string write_trace(const Model& m, const std::string& path, const TraceOptions& opt) {
  const Config& c = m.config;
  const int n = std::clamp(opt.tokens, 1, c.seq_len);
  std::vector<int> seq = opt.prompt.empty() ? std::vector<int>{1} : opt.prompt;
  if (static_cast<int>(seq.size()) > n) seq.resize(n);
  if (static_cast<int>(seq.size()) < n) {
    if (opt.mode == "greedy") {
      seq = generate_greedy(m, seq, n - static_cast<int>(seq.size()));
    } else if (seq.size() == 1 && seq[0] == 1) {
      seq = sample_sequence(m, n, opt.seed);
    } else {
      throw UsageError("sampled traces start from BOS; use --mode greedy with --prompt-ids");
    }
  }
  // One prefill of the whole sequence gives every layer's post-RoPE Q and K and V.
  KVCache cache(c);
  RunState st;
  Capture cap;
  ForwardOptions fo;
  fo.logits = Logits::kNone;
  fo.capture = &cap;
  forward(m, cache, st, seq, fo);

  h5::Writer w(path);
  auto root = w.root();
  h5::write_attr(root, "format", "mobisim-kernel-trace");
  h5::write_attr(root, "format_version", std::int64_t{1});
  h5::write_attr(root, "model_source", m.source);
  h5::write_attr(root, "arch", c.arch);
  h5::write_attr(root, "rope_layout", to_string(c.rope));
  for (auto [k, v] : std::vector<std::pair<const char*, int>>{{"dim", c.dim},
                                                               {"hidden_dim", c.hidden_dim},
                                                               {"n_layers", c.n_layers},
                                                               {"n_heads", c.n_heads},
                                                               {"n_kv_heads", c.n_kv_heads},
                                                               {"head_dim", c.head_dim},
                                                               {"vocab_size", c.vocab_size},
                                                               {"seq_len", c.seq_len},
                                                               {"top_k", opt.top_k},
                                                               {"recent", opt.recent}})
    h5::write_attr(root, k, std::int64_t{v});
  h5::write_attr(root, "rope_theta", static_cast<double>(c.rope_theta));
  h5::write_attr(root, "mode", opt.mode);
  h5::write_attr(root, "seed", static_cast<std::int64_t>(opt.seed));
  h5::write_dataset(root, "tokens", std::vector<std::int32_t>(seq.begin(), seq.end()));

  const int hd = c.head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  double entropy_sum = 0;
  std::int64_t rows_total = 0;
  for (int l = 0; l < c.n_layers; ++l) {
    auto g = w.group(fmt::format("layers/{}", l));
    std::vector<float> kf(cap.k[l].data(), cap.k[l].data() + cap.k[l].size());
    std::vector<float> vf(cap.v[l].data(), cap.v[l].data() + cap.v[l].size());
    h5::write_matrix(g, "k", kf, n, c.kv_dim(), "post-RoPE key");
    h5::write_matrix(g, "v", vf, n, c.kv_dim(), "value");
    std::vector<std::int64_t> pos_col, head_col, attended_col, argmax_col;
    std::vector<double> ent_col, max_col, topk_col, recent_col, sink_col;
    std::vector<float> p;
    for (int i = 0; i < n; ++i)
      for (int h = 0; h < c.n_heads; ++h) {
        const int kvh = h / c.kv_mul();
        const float* q = cap.q[l].row(i).data() + h * hd;
        p.assign(i + 1, 0.0f);
        float mx = -INFINITY;
        for (int j = 0; j <= i; ++j) {
          const float* k = cap.k[l].row(j).data() + kvh * hd;
          float s = 0;
          for (int d = 0; d < hd; ++d) s += q[d] * k[d];
          p[j] = s * scale;
          mx = std::max(mx, p[j]);
        }
        double sum = 0;
        for (float& x : p) sum += x = std::exp(x - mx);
        double ent = 0, recent = 0;
        for (int j = 0; j <= i; ++j) {
          const double pj = p[j] / sum;
          p[j] = static_cast<float>(pj);
          if (pj > 0) ent -= pj * std::log(pj);
          if (j > i - opt.recent) recent += pj;
        }
        std::vector<float> sorted(p);
        const int k = std::min(opt.top_k, i + 1);
        std::partial_sort(sorted.begin(), sorted.begin() + k, sorted.end(), std::greater<float>());
        double topk = 0;
        for (int j = 0; j < k; ++j) topk += sorted[j];
        pos_col.push_back(i);
        head_col.push_back(h);
        attended_col.push_back(i + 1);
        argmax_col.push_back(std::max_element(p.begin(), p.end()) - p.begin());
        ent_col.push_back(ent);
        max_col.push_back(sorted[0]);
        topk_col.push_back(topk);
        recent_col.push_back(recent);
        sink_col.push_back(p[0]);
        entropy_sum += ent;
        ++rows_total;
      }
    h5::Table t;
    t.add("position", pos_col);
    t.add("head", head_col);
    t.add("attended", attended_col, "keys");
    t.add("entropy", ent_col, "nats");
    t.add("max_prob", max_col);
    t.add("argmax_key", argmax_col, "position");
    t.add("topk_mass", topk_col);
    t.add("recent_mass", recent_col);
    t.add("sink_mass", sink_col);
    t.write(g, "attention");
  }
  w.commit();
  return fmt::format("wrote {}: {} tokens, {} layers, K/V [{} x {}] per layer, {} attention rows (mean entropy "
                     "{:.3f} nats)\n",
                     path, n, c.n_layers, n, c.kv_dim(), rows_total, rows_total ? entropy_sum / rows_total : 0.0);
}

}  // namespace mobisim::kernel
