#include "tools/fp4serve/bench_serve_random.h"

#include <cmath>
#include <limits>
#include <numbers>

#include "core/check.h"

namespace fp4::bench_serve {
namespace {

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

}  // namespace

Rng::Rng(uint64_t seed) {
  for (uint64_t& word : s_) word = splitmix64(seed);
}

uint64_t Rng::next_u64() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Rng::uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

int64_t Rng::uniform_int(int64_t lo, int64_t hi) {
  FP4_CHECK(lo <= hi, "uniform_int: empty range [{}, {}]", lo, hi);
  const uint64_t span = static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo);
  if (span == std::numeric_limits<uint64_t>::max()) return static_cast<int64_t>(next_u64());
  const uint64_t range = span + 1;
  // The largest multiple of `range` that fits in 2^64: draws at or above it would favour the
  // low residues, so they are redrawn (at most half the draws, usually almost none).
  const uint64_t limit = std::numeric_limits<uint64_t>::max() - std::numeric_limits<uint64_t>::max() % range;
  uint64_t x = next_u64();
  while (x >= limit) x = next_u64();
  return static_cast<int64_t>(static_cast<uint64_t>(lo) + x % range);
}

double Rng::normal() {
  if (have_spare_normal_) {
    have_spare_normal_ = false;
    return spare_normal_;
  }
  // 1 - uniform() lies in (0, 1], so the logarithm is finite.
  const double r = std::sqrt(-2.0 * std::log(1.0 - uniform()));
  const double theta = 2.0 * std::numbers::pi * uniform();
  spare_normal_ = r * std::sin(theta);
  have_spare_normal_ = true;
  return r * std::cos(theta);
}

double Rng::exponential(double mean) { return -mean * std::log(1.0 - uniform()); }

double Rng::gamma(double shape, double scale) {
  FP4_CHECK(shape > 0 && scale > 0, "gamma: shape {} and scale {} must be positive", shape, scale);
  if (shape < 1.0) {
    const double u = 1.0 - uniform();  // (0, 1]
    return gamma(shape + 1.0, scale) * std::pow(u, 1.0 / shape);
  }
  const double d = shape - 1.0 / 3.0;
  const double c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    const double x = normal();
    double v = 1.0 + c * x;
    if (v <= 0.0) continue;
    v = v * v * v;
    const double u = 1.0 - uniform();
    if (u < 1.0 - 0.0331 * x * x * x * x) return d * v * scale;
    if (std::log(u) < 0.5 * x * x + d * (1.0 - v + std::log(v))) return d * v * scale;
  }
}

std::vector<double> arrival_times(Rng& rng, int64_t n, double rate, double burstiness) {
  FP4_CHECK(rate > 0, "--request-rate must be positive or inf, got {}", rate);
  FP4_CHECK(burstiness > 0, "--burstiness must be positive, got {}", burstiness);
  std::vector<double> t(static_cast<size_t>(n), 0.0);
  if (n == 0 || std::isinf(rate)) return t;
  double sum = 0.0;
  for (auto& ti : t) {
    sum += std::isinf(burstiness) ? 1.0 / rate : rng.gamma(burstiness, 1.0 / (rate * burstiness));
    ti = sum;
  }
  if (sum > 0) {
    const double factor = (static_cast<double>(n) / rate) / sum;
    for (auto& ti : t) ti *= factor;
  }
  return t;
}

}  // namespace fp4::bench_serve
