#include "core/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace fp4 {

namespace {
std::atomic<int> configured_threads{0};
}  // namespace

int default_num_threads() {
  if (const int n = configured_threads.load(std::memory_order_relaxed); n > 0) return n;
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

void set_default_num_threads(int n) { configured_threads.store(std::max(n, 0)); }

void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int num_threads) {
  if (n <= 0) return;
  int threads = num_threads > 0 ? num_threads : default_num_threads();
  threads = static_cast<int>(std::min<int64_t>(threads, n));
  if (threads == 1) {
    fn(0, n);
    return;
  }
  std::exception_ptr first_error;
  std::mutex error_mutex;
  std::vector<std::thread> workers;
  workers.reserve(threads);
  const int64_t chunk = (n + threads - 1) / threads;
  for (int t = 0; t < threads; ++t) {
    const int64_t begin = t * chunk, end = std::min(n, begin + chunk);
    if (begin >= end) break;
    workers.emplace_back([&, begin, end] {
      try {
        fn(begin, end);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!first_error) first_error = std::current_exception();
      }
    });
  }
  for (auto& w : workers) w.join();
  if (first_error) std::rethrow_exception(first_error);
}

void parallel_for_cost(int64_t n, int64_t cost_per_item,
                       const std::function<void(int64_t, int64_t)>& fn) {
  // About 50 microseconds of work per thread: the point where a thread starts paying for itself.
  constexpr int64_t kMinWorkPerThread = 100'000;
  const int64_t work = n * std::max<int64_t>(cost_per_item, 1);
  const int64_t threads = std::clamp<int64_t>(work / kMinWorkPerThread, 1, default_num_threads());
  parallel_for(n, fn, static_cast<int>(threads));
}

}  // namespace fp4
