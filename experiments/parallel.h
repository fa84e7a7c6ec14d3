#pragma once
// Deterministic parallelism for experiment drivers: independent simulations
// (one per user, policy or sweep point) run on `threads` worker threads, each
// writing only its own result slot; the caller merges slots in index order. The
// result is therefore identical whatever the thread count. Each task must own
// its Simulator, Device and RNG streams (no shared mutable state).
#include <atomic>
#include <cstddef>
#include <exception>
#include <functional>
#include <thread>
#include <vector>

namespace mobisim::experiments {

// Runs fn(i) for i in [0, n) on up to `threads` threads (<= 1: inline, in order).
// The first exception (lowest index) is rethrown after all workers stop.
inline void parallel_for(std::size_t n, int threads, const std::function<void(std::size_t)>& fn) {
  if (threads <= 1 || n <= 1) {
    for (std::size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::atomic<std::size_t> next{0};
  std::vector<std::exception_ptr> errors(n);
  auto worker = [&] {
    for (std::size_t i = next++; i < n; i = next++) {
      try {
        fn(i);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  std::vector<std::thread> pool;
  const std::size_t t = std::min<std::size_t>(static_cast<std::size_t>(threads), n);
  for (std::size_t k = 0; k < t; ++k) pool.emplace_back(worker);
  for (auto& th : pool) th.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace mobisim::experiments
