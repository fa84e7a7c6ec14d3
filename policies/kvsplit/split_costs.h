#pragma once
// The costs a compute-or-load split is built from (KVPR, Cake), in seconds.
//
// A request needs the K/V of positions [0, s). Positions [0, l) are rebuilt on
// the compute stream; positions [l, s) are read on the copy stream (PCIe from
// host DRAM on the server, UFS/NVMe on a phone). Two views of the same costs:
//
//   AnalyticSplitCosts   the document's own per-layer form (seed 002 section 3.1):
//                          X transfer   b*l*h*p / v_com
//                          recompute    4*b*l*h^2 / v_gpu        (K and V projections)
//                          KV load      2*b*(s-l)*h*p / v_com
//                          Q            2*b*s*h^2 / v_gpu        (Q-aware form)
//   DeviceSplitCosts     the CostModel's operators on a device profile's compute unit
//                        (roofline, per-call overheads) and its link or storage.
//
// Recompute comes in two flavours. `kHidden` (KVPR): K/V rebuilt from stored
// layer inputs X, which must first cross the link. `kPrefill` (Cake on disk, a
// phone's prefix cache): K/V rebuilt by running the model on the tokens, so
// nothing crosses the link but a block at position p attends all p earlier keys.
#include <cstdint>
#include <memory>
#include <string>

#include "devices/device.h"
#include "models/cost_model.h"

namespace mobisim::policies::kvsplit {

// The document's symbols (seed 002 section 3.1).
struct AnalyticRates {
  double v_gpu_flops = 0;  // FLOP/s of the compute stream
  double v_com_bps = 0;    // bytes/s of the copy stream
  double h = 0;            // embedding dimension (K/V width assumed equal: multi-head attention)
  double p_bytes = 2;      // precision, bytes per element
  double b = 1;            // batch size
};

class SplitCosts {
 public:
  virtual ~SplitCosts() = default;
  // Moving the stored layer inputs X[0:l] to the compute unit (0 for prefill-style recompute).
  virtual double x_transfer_s(std::int64_t l) const = 0;
  // Rebuilding K/V of positions [from, to) on the compute stream.
  virtual double recompute_s(std::int64_t from, std::int64_t to) const = 0;
  // Reading K/V of `n` positions on the copy stream (one request).
  virtual double load_s(std::int64_t n) const = 0;
  // Q of all `s` positions (needed by attention over them: the Q-aware form).
  virtual double q_s(std::int64_t s) const = 0;
  // Layers the costs cover (per-block overheads are charged once per layer and block).
  virtual int layers() const = 0;
  // The document's rates equivalent to these costs (what the closed forms read).
  virtual AnalyticRates rates() const = 0;
  virtual std::string describe() const = 0;
};

// The document's per-layer analytic form.
class AnalyticSplitCosts : public SplitCosts {
 public:
  explicit AnalyticSplitCosts(AnalyticRates r);
  double x_transfer_s(std::int64_t l) const override;
  double recompute_s(std::int64_t from, std::int64_t to) const override;
  double load_s(std::int64_t n) const override;
  double q_s(std::int64_t s) const override;
  int layers() const override { return 1; }
  AnalyticRates rates() const override { return r_; }
  std::string describe() const override;

 private:
  AnalyticRates r_;
};

enum class RecomputeKind { kHidden, kPrefill };
enum class Payload { kKv, kQkv };  // what the store holds per token: K/V, or PerCache's Q/K/V chunks

struct DeviceCostOptions {
  std::string compute_unit = "gpu";  // a unit of the profile's `compute`, or "npu"
  std::string link;                  // a link of the profile (e.g. "pcie"); empty: read from storage
  RecomputeKind recompute = RecomputeKind::kHidden;
  Payload payload = Payload::kKv;
  std::int64_t npu_chunk = 64;       // NPU graph chunk (tokens per execution) when compute_unit is "npu"
  double page_cache_fraction = 0;    // storage: share of the bytes already in DRAM (page cache), [0, 1)
};

// Costs of a model on a device profile (the CostModel's operators and the profile's rates).
class DeviceSplitCosts : public SplitCosts {
 public:
  DeviceSplitCosts(const models::CostModel& cost, const devices::DeviceProfile& profile, DeviceCostOptions opt);
  double x_transfer_s(std::int64_t l) const override;
  double recompute_s(std::int64_t from, std::int64_t to) const override;
  double load_s(std::int64_t n) const override;
  double q_s(std::int64_t s) const override;
  int layers() const override { return cost_.spec().n_layers; }
  AnalyticRates rates() const override;
  std::string describe() const override;
  double bytes_per_token_loaded() const;

 private:
  double read_bytes_s(double bytes) const;
  double compute_s(const models::Work& w) const;
  models::CostModel cost_;  // copies: the costs outlive the caller's objects
  devices::DeviceProfile profile_;
  DeviceCostOptions opt_;
};

}  // namespace mobisim::policies::kvsplit
