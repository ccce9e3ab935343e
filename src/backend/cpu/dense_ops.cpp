// The token-parallel ops of the CPU backend: projections, norms, RoPE, activations, routing.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/check.h"
#include "core/thread_pool.h"
#include "formats/minifloat.h"
#include "formats/mxfp8.h"

namespace fp4::cpu {
namespace {

// Eight independent partial sums: without -ffast-math the compiler may not reorder one running
// sum, but it can vectorise eight of them. The summation order is fixed, so results are
// reproducible run to run.
float dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l) acc[l] += a[i + l] * b[i + l];
  }
  float tail = 0.0f;
  for (; i < n; ++i) tail += a[i] * b[i];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail;
}

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

}  // namespace

void linear(const LinearParams& p) {
  FP4_CHECK(p.m >= 0 && p.n >= 0 && p.k >= 0, "linear: negative size m={} n={} k={}", p.m, p.n, p.k);
  FP4_CHECK(linear_weight_forms(p) == 1 || p.n * p.k == 0,
            "linear: exactly one of w, w_bf16 and w_e4m3 must be given");
  FP4_CHECK(p.w_e4m3 == nullptr || (p.w_scales != nullptr && p.k % kMxfp8BlockElems == 0),
            "linear: an MXFP8 weight needs its scales and k a multiple of {} (k={})", kMxfp8BlockElems, p.k);
  if (p.m == 0 || p.n == 0) return;
  if (p.w_bf16 != nullptr || p.w_e4m3 != nullptr) {
    // The same values decoded exactly: the FP32 path gives the same bits.
    std::vector<float> w(static_cast<size_t>(p.n * p.k));
    if (p.w_bf16 != nullptr) {
      for (size_t i = 0; i < w.size(); ++i) w[i] = bf16_decode(p.w_bf16[i]);
    } else {
      for (size_t b = 0; b < w.size() / kMxfp8BlockElems; ++b) {
        mxfp8_dequantize_block(p.w_e4m3 + b * kMxfp8BlockElems, p.w_scales[b], w.data() + b * kMxfp8BlockElems);
      }
    }
    LinearParams wide = p;
    wide.w = w.data();
    wide.w_bf16 = nullptr;
    wide.w_e4m3 = wide.w_scales = nullptr;
    linear(wide);
    return;
  }
  // Output columns in chunks: each weight row is read once from memory and reused for every
  // token row while it sits in cache; tokens in tiles of 64 keep the x rows cached too.
  constexpr int64_t kTokenTile = 64;
  parallel_for_cost(p.n, p.m * p.k, [&](int64_t n0, int64_t n1) {
    for (int64_t m0 = 0; m0 < p.m; m0 += kTokenTile) {
      const int64_t m1 = std::min(p.m, m0 + kTokenTile);
      for (int64_t j = n0; j < n1; ++j) {
        const float* w = p.w + j * p.k;
        for (int64_t i = m0; i < m1; ++i) p.y[i * p.n + j] = dot(p.x + i * p.k, w, p.k);
      }
    }
  });
}

void rms_norm(const RmsNormParams& p) {
  FP4_CHECK(p.dim > 0 && p.eps > 0, "rms_norm: dim {} and eps {} must be positive", p.dim, p.eps);
  parallel_for_cost(p.rows, 3 * p.dim, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* x = p.x + r * p.dim;
      float* y = p.y + r * p.dim;
      double sum_sq = 0.0;  // double: a row of 6144 squares must not lose its small terms
      for (int64_t i = 0; i < p.dim; ++i) sum_sq += double{x[i]} * x[i];
      const float inv = static_cast<float>(1.0 / std::sqrt(sum_sq / p.dim + p.eps));
      for (int64_t i = 0; i < p.dim; ++i) {
        const float w = p.gemma ? 1.0f + p.weight[i] : p.weight[i];
        y[i] = x[i] * inv * w;
      }
    }
  });
}

void add_rms_norm(const AddRmsNormParams& p) {
  FP4_CHECK(p.dim > 0 && p.eps > 0, "add_rms_norm: dim {} and eps {} must be positive", p.dim, p.eps);
  if (p.delta != nullptr) {
    const int64_t n = p.rows * p.dim;
    parallel_for_cost(n, 1, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) p.x[i] += p.delta[i];
    });
  }
  rms_norm({.x = p.x, .weight = p.weight, .y = p.y, .rows = p.rows, .dim = p.dim, .eps = p.eps,
            .gemma = p.gemma});
}

void gather_rows(const GatherRowsParams& p) {
  FP4_CHECK(p.count >= 0 && p.dim >= 0, "gather_rows: negative size count={} dim={}", p.count, p.dim);
  for (int64_t i = 0; i < p.count; ++i) {
    FP4_CHECK(p.ids[i] >= 0 && p.ids[i] < p.table_rows, "gather_rows: row id {} is outside the "
              "table's {} rows", p.ids[i], p.table_rows);
  }
  FP4_CHECK((p.table != nullptr) != (p.table_bf16 != nullptr) || p.count * p.dim == 0,
            "gather_rows: exactly one of table and table_bf16 must be given");
  parallel_for_cost(p.count, p.dim, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t first = int64_t{p.ids[i]} * p.dim;
      float* out = p.out + i * p.dim;
      if (p.table_bf16 != nullptr) {
        for (int64_t j = 0; j < p.dim; ++j) out[j] = bf16_decode(p.table_bf16[first + j]);
      } else {
        std::copy_n(p.table + first, p.dim, out);
      }
    }
  });
}

void rope(const RopeParams& p) {
  FP4_CHECK(p.rotary_dim % 2 == 0 && p.rotary_dim <= p.head_dim,
            "rope: rotary_dim {} must be even and at most head_dim {}", p.rotary_dim, p.head_dim);
  const int64_t half = p.rotary_dim / 2;
  std::vector<double> inv_freq(static_cast<size_t>(half));
  for (int64_t j = 0; j < half; ++j) {
    inv_freq[j] = rope_inv_freq(p.theta, p.rotary_dim, j);
  }
  parallel_for_cost(p.tokens, p.heads * p.rotary_dim + 40 * p.rotary_dim, [&](int64_t t0, int64_t t1) {
    std::vector<float> cos_v(static_cast<size_t>(half)), sin_v(static_cast<size_t>(half));
    for (int64_t t = t0; t < t1; ++t) {
      for (int64_t j = 0; j < half; ++j) {
        const double angle = static_cast<double>(p.positions[t]) * inv_freq[j];
        cos_v[j] = static_cast<float>(std::cos(angle));
        sin_v[j] = static_cast<float>(std::sin(angle));
      }
      for (int64_t h = 0; h < p.heads; ++h) {
        float* x = p.x + (t * p.heads + h) * p.head_dim;
        for (int64_t j = 0; j < half; ++j) {
          const float a = x[j], b = x[j + half];
          x[j] = a * cos_v[j] - b * sin_v[j];
          x[j + half] = b * cos_v[j] + a * sin_v[j];
        }
      }
    }
  });
}

void gated_activation(const GatedActivationParams& p) {
  parallel_for_cost(p.m, 20 * p.inter, [&](int64_t m0, int64_t m1) {
    for (int64_t r = m0; r < m1; ++r) {
      const float* g = p.gate + r * p.stride;
      const float* u = p.up + r * p.stride;
      for (int64_t i = 0; i < p.inter; ++i) {
        float o;
        if (p.kind == GatedActivation::kSilu) {
          o = g[i] * sigmoid(g[i]) * u[i];
        } else {
          const float gc = std::min(g[i], p.limit);
          const float uc = std::clamp(u[i], -p.limit, p.limit);
          o = gc * sigmoid(p.alpha * gc) * (uc + p.beta);
        }
        if (p.out_bf16 != nullptr) p.out_bf16[r * p.inter + i] = bf16_encode(o);
        else p.out[r * p.inter + i] = o;
      }
    }
  });
}

void router(const RouterParams& p) {
  FP4_CHECK(p.top_k > 0 && p.top_k <= p.experts, "router: top_k {} must be in [1, {}]", p.top_k,
            p.experts);
  for (int64_t t = 0; p.forced_ids != nullptr && t < p.tokens; ++t) {
    const int32_t* forced = p.forced_ids + t * p.top_k;
    for (int64_t i = 0; i < p.top_k; ++i) {
      FP4_CHECK(forced[i] >= 0 && forced[i] < p.experts && std::find(forced, forced + i, forced[i]) == forced + i,
                "router: token {}'s forced experts must be {} distinct ids below {}; entry {} is {}", t, p.top_k,
                p.experts, i, forced[i]);
    }
  }
  parallel_for_cost(p.tokens, 30 * p.experts, [&](int64_t t0, int64_t t1) {
    std::vector<float> score(static_cast<size_t>(p.experts));
    std::vector<float> choice(static_cast<size_t>(p.experts));
    std::vector<int32_t> order(static_cast<size_t>(p.experts));
    for (int64_t t = t0; t < t1; ++t) {
      for (int64_t e = 0; e < p.experts; ++e) {
        score[e] = sigmoid(p.logits[t * p.experts + e]);
        choice[e] = score[e] + (p.bias != nullptr ? p.bias[e] : 0.0f);
      }
      auto before = [&](int32_t a, int32_t b) { return choice[a] != choice[b] ? choice[a] > choice[b] : a < b; };
      if (p.forced_ids != nullptr) {
        std::copy_n(p.forced_ids + t * p.top_k, p.top_k, order.begin());
        std::sort(order.begin(), order.begin() + p.top_k, before);
      } else {
        std::iota(order.begin(), order.end(), 0);
        std::partial_sort(order.begin(), order.begin() + p.top_k, order.end(), before);
      }
      float sum = 0.0f;
      for (int64_t i = 0; i < p.top_k; ++i) sum += score[order[i]];
      for (int64_t i = 0; i < p.top_k; ++i) {
        p.expert_ids[t * p.top_k + i] = order[i];
        p.weights[t * p.top_k + i] = score[order[i]] / sum;
      }
    }
  });
}

}  // namespace fp4::cpu
