#include "backend/cuda/dense_ops.h"

#include "backend/cuda/cuda_check.h"

namespace fp4::cuda {
namespace {

constexpr int64_t kMaxGrid = (int64_t{1} << 31) - 1;

void check_norm(int64_t rows, int64_t dim, float eps, const char* op) {
  FP4_CHECK(dim > 0 && dim < (int64_t{1} << 31) && eps > 0, "{}: dim {} and eps {} must be positive",
            op, dim, eps);
  FP4_CHECK(rows >= 0 && rows <= kMaxGrid, "{}: {} rows", op, rows);
}

}  // namespace

void rms_norm(const RmsNormParams& p, cudaStream_t stream) {
  check_norm(p.rows, p.dim, p.eps, "rms_norm");
  if (p.rows == 0) return;
  FP4_CUDA_CHECK(detail::launch_norm({.x = p.x, .x_out = nullptr, .delta = nullptr, .weight = p.weight,
                                      .y = p.y, .rows = p.rows, .dim = static_cast<int>(p.dim),
                                      .eps = p.eps, .gemma = p.gemma},
                                     stream));
}

void add_rms_norm(const AddRmsNormParams& p, cudaStream_t stream) {
  check_norm(p.rows, p.dim, p.eps, "add_rms_norm");
  if (p.rows == 0) return;
  FP4_CHECK(p.y != p.x && (p.delta == nullptr || p.y != p.delta),
            "add_rms_norm: y must not alias x or delta");
  FP4_CUDA_CHECK(detail::launch_norm({.x = p.x, .x_out = p.delta != nullptr ? p.x : nullptr,
                                      .delta = p.delta, .weight = p.weight, .y = p.y, .rows = p.rows,
                                      .dim = static_cast<int>(p.dim), .eps = p.eps, .gemma = p.gemma},
                                     stream));
}

void rope(const RopeParams& p, cudaStream_t stream) {
  FP4_CHECK(p.rotary_dim % 2 == 0 && p.rotary_dim <= p.head_dim,
            "rope: rotary_dim {} must be even and at most head_dim {}", p.rotary_dim, p.head_dim);
  FP4_CHECK(p.rotary_dim / 2 <= detail::kMaxRopePairs, "rope: rotary_dim {} is over the kernel's {}",
            p.rotary_dim, 2 * detail::kMaxRopePairs);
  FP4_CHECK(p.tokens >= 0 && p.heads >= 0 && p.head_dim < (int64_t{1} << 31) && p.heads < (int64_t{1} << 31),
            "rope: {} tokens of {} heads", p.tokens, p.heads);
  detail::RopeArgs a{.x = p.x, .positions = p.positions, .tokens = p.tokens,
                     .heads = static_cast<int>(p.heads), .head_dim = static_cast<int>(p.head_dim),
                     .pairs = static_cast<int>(p.rotary_dim / 2)};
  if (a.pairs == 0 || p.tokens == 0 || p.heads == 0) return;
  FP4_CHECK(p.tokens * p.heads * a.pairs / 256 < kMaxGrid, "rope: {} tokens of {} heads exceed one launch",
            p.tokens, p.heads);
  for (int j = 0; j < a.pairs; ++j) a.inv_freq[j] = rope_inv_freq(p.theta, p.rotary_dim, j);
  FP4_CUDA_CHECK(detail::launch_rope(a, stream));
}

void gather_rows(const GatherRowsParams& p, cudaStream_t stream) {
  FP4_CHECK(p.count >= 0 && p.count <= kMaxGrid && p.dim >= 0 && p.table_rows >= 0,
            "gather_rows: {} rows of {} from a table of {}", p.count, p.dim, p.table_rows);
  if (p.count == 0 || p.dim == 0) return;
  FP4_CHECK((p.table != nullptr) != (p.table_bf16 != nullptr),
            "gather_rows: exactly one of table and table_bf16 must be given");
  FP4_CUDA_CHECK(detail::launch_gather_rows(p, stream));
}

}  // namespace fp4::cuda
