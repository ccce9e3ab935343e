// The statistics of `fp4serve bench serve`, computed from the per-request records exactly as
// `vllm bench serve` computes them (its calculate_metrics), so that the two can be compared.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tools/fp4serve/bench_serve_stream.h"

namespace fp4::bench_serve {

// numpy.percentile's default ("linear"): sort, then interpolate between the values at ranks
// floor(h) and ceil(h), h = (n - 1) * p / 100. `values` need not be sorted; p in [0, 100].
double percentile(std::vector<double> values, double p);

// Mean, median, population standard deviation (numpy's default ddof=0) and the requested
// percentiles, all in milliseconds, of values given in seconds. Empty input gives zeros, as
// vLLM's `np.mean(x or 0)` does.
struct Distribution {
  double mean_ms = 0;
  double median_ms = 0;
  double std_ms = 0;
  std::vector<std::pair<double, double>> percentiles_ms;  // (p, value)
};
Distribution describe(const std::vector<double>& values_s, const std::vector<double>& percentiles);

// Peak output rate and peak concurrency as vLLM computes them, over the successful requests:
// from the earliest start, 1-second buckets; a token event falls in the bucket of its time
// (start + TTFT + the ITLs so far) and a request counts in every bucket from its start's to its
// end's, both included. (So the peak rate counts events, which equals tokens when the server
// sends one token per event; and the peak concurrency counts requests alive at any moment of a
// second, an upper bound on the instantaneous count.)
struct Peaks {
  double output_tokens_per_s = 0;
  int64_t concurrent_requests = 0;
  std::vector<double> tokens_per_bucket;
  std::vector<double> requests_per_bucket;
};
Peaks peaks(const std::vector<RequestRecord>& records);

struct Summary {
  int64_t completed = 0;
  int64_t failed = 0;
  double duration_s = 0;
  int64_t total_input = 0;   // over successful requests
  int64_t total_output = 0;  // over successful requests
  int64_t output_from_usage = 0;  // successful requests whose count came from usage
  double request_throughput = 0;
  double output_throughput = 0;
  double total_token_throughput = 0;
  Peaks peak;
  Distribution ttft, tpot, itl, e2el;
  Distribution queue;  // client-side wait for a concurrency slot: start - scheduled
};

// TPOT of one request = (E2EL - TTFT) / (output_tokens - 1), only for outputs of more than one
// token; ITL pools every gap of every successful request.
Summary summarize(const std::vector<RequestRecord>& records, double duration_s,
                  const std::vector<double>& percentiles);

}  // namespace fp4::bench_serve
