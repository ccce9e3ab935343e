#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "core/check.h"

namespace fp4 {
namespace {

TEST(ParallelFor, CoversEveryIndexExactlyOnce) {
  for (int64_t n : {0, 1, 7, 1000, 100003}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    parallel_for(n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[i]++;
    }, 3);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "index " << i << " of " << n;
  }
}

TEST(ParallelFor, RethrowsWorkerErrors) {
  EXPECT_THROW(parallel_for(100, [](int64_t b, int64_t) { FP4_CHECK(b != 0, "boom"); }, 4), Error);
}

}  // namespace
}  // namespace fp4
