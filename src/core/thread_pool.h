// parallel_for over an index range: one std::thread per chunk, started and joined per call, so
// it suits work of milliseconds or more (the CPU backend's tensors, the exhaustive codec tests).
// Work is split into contiguous chunks so each thread streams through memory.
#pragma once

#include <cstdint>
#include <functional>

namespace fp4 {

// Number of threads parallel_for uses: the count set below, else hardware concurrency, at
// least 1.
int default_num_threads();

// Caps every later parallel_for that does not name its own count (0 restores the default);
// `--threads` of the CPU engine.
void set_default_num_threads(int n);

// Calls fn(begin, end) on disjoint chunks covering [0, n), at most num_threads at once
// (0 = default_num_threads()). Returns when every chunk is done; rethrows the first exception.
void parallel_for(int64_t n, const std::function<void(int64_t begin, int64_t end)>& fn,
                  int num_threads = 0);

// parallel_for for many small calls (a decode step runs dozens of tiny ops): uses only as many
// threads as the work pays for, so that starting a thread (tens of microseconds) never costs
// more than it saves. `cost_per_item` is in rough units of one multiply-add.
void parallel_for_cost(int64_t n, int64_t cost_per_item,
                       const std::function<void(int64_t begin, int64_t end)>& fn);

}  // namespace fp4
