// parallel_for over an index range: one std::thread per chunk, started and joined per call, so
// it suits work of milliseconds or more (the CPU backend's tensors, the exhaustive codec tests).
// Work is split into contiguous chunks so each thread streams through memory.
#pragma once

#include <cstdint>
#include <functional>

namespace fp4 {

// Number of threads parallel_for uses: hardware concurrency, at least 1.
int default_num_threads();

// Calls fn(begin, end) on disjoint chunks covering [0, n), at most num_threads at once
// (0 = default_num_threads()). Returns when every chunk is done; rethrows the first exception.
void parallel_for(int64_t n, const std::function<void(int64_t begin, int64_t end)>& fn,
                  int num_threads = 0);

}  // namespace fp4
