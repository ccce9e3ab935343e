// The one source of randomness of `fp4serve bench serve`: a seeded xoshiro256** generator and
// the few distributions the benchmark needs, written out here rather than taken from <random>,
// whose distributions differ between standard libraries. The same seed therefore gives the same
// prompts and the same arrival times with any compiler.
#pragma once

#include <cstdint>
#include <vector>

namespace fp4::bench_serve {

class Rng {
 public:
  // The four state words come from SplitMix64 of the seed, as xoshiro's authors recommend, so
  // that nearby seeds give unrelated streams.
  explicit Rng(uint64_t seed);

  uint64_t next_u64();
  // Uniform in [0, 1) with 53 random bits.
  double uniform();
  // Uniform integer in [lo, hi], inclusive, without modulo bias (rejection sampling).
  int64_t uniform_int(int64_t lo, int64_t hi);
  // Standard normal (Box-Muller; the second value of each pair is kept for the next call).
  double normal();
  // Exponential with the given mean.
  double exponential(double mean);
  // Gamma(shape, scale): Marsaglia and Tsang's method for shape >= 1, and for shape < 1 the
  // identity Gamma(k) = Gamma(k + 1) * U^(1/k). Mean shape*scale, variance shape*scale^2.
  double gamma(double shape, double scale);

 private:
  uint64_t s_[4];
  bool have_spare_normal_ = false;
  double spare_normal_ = 0.0;
};

// Arrival times in seconds after the benchmark starts, as `vllm bench serve` draws them: all
// zero when the rate is infinite; otherwise gaps Gamma(burstiness, 1/(rate*burstiness)) (mean
// 1/rate; burstiness 1 is a Poisson process, an infinite burstiness gives equal gaps 1/rate),
// summed, then scaled so that the last arrival falls at n/rate exactly, which removes the
// 1-2% run-to-run spread of the offered load that the raw sum would have.
std::vector<double> arrival_times(Rng& rng, int64_t n, double rate, double burstiness);

}  // namespace fp4::bench_serve
