// The check of a linear y = x w^T against a reference within a bound that scales with each
// output's S = sum_l |x_il w_jl| (the scale of a dot product's rounding error; the bounds
// themselves are derived where they are used).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

namespace fp4::testing {

// Adds a failure naming the first output (i, j) with |got - want| > per_s * S and returns -1;
// otherwise returns how many outputs equal the reference exactly.
inline int64_t check_linear_within(const std::vector<float>& x, const std::vector<float>& w,
                                   const std::vector<float>& got, const std::vector<float>& want, int64_t m,
                                   int64_t n, int64_t k, double per_s) {
  int64_t exact = 0;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t l = 0; l < k; ++l) s += std::abs(double(x[i * k + l]) * w[j * k + l]);
      const double diff = std::abs(double(got[i * n + j]) - want[i * n + j]);
      if (!(diff <= per_s * s)) {
        ADD_FAILURE() << "output (" << i << ", " << j << "): " << got[i * n + j] << " against " << want[i * n + j]
                      << ", |difference| " << diff << " > " << per_s << " S = " << per_s * s;
        return -1;
      }
      exact += diff == 0;
    }
  }
  return exact;
}

}  // namespace fp4::testing
