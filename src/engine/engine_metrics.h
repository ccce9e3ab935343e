// Counters the serving engine keeps for /metrics, with vLLM's meanings. The engine thread
// writes them; readers take a copy under the engine's lock.
#pragma once

#include <cstdint>
#include <vector>

namespace fp4::engine {

// A cumulative histogram as Prometheus exposes one: counts[i] observations <= bounds[i], plus
// the total count and sum.
struct Histogram {
  std::vector<double> bounds;
  std::vector<int64_t> counts;  // per bucket, not cumulative
  int64_t count = 0;
  double sum = 0.0;

  explicit Histogram(std::vector<double> upper_bounds = {})
      : bounds(std::move(upper_bounds)), counts(bounds.size(), 0) {}
  void observe(double v) {
    for (size_t i = 0; i < bounds.size(); ++i) {
      if (v <= bounds[i]) {
        ++counts[i];
        break;
      }
    }
    ++count;
    sum += v;
  }
};

struct EngineMetrics {
  // Gauges
  int64_t num_running = 0;
  int64_t num_waiting = 0;
  int64_t kv_pages_total = 0;
  int64_t kv_pages_used = 0;  // held by a running request (cached-but-free pages not counted)
  // Counters
  int64_t prompt_tokens = 0;      // of finished and aborted requests, as submitted
  int64_t generation_tokens = 0;  // sampled, all requests
  int64_t num_preemptions = 0;
  int64_t prefix_cache_queries = 0;  // tokens
  int64_t prefix_cache_hits = 0;     // tokens
  int64_t requests_finished_stop = 0;
  int64_t requests_finished_length = 0;
  int64_t requests_finished_abort = 0;
  int64_t steps = 0;
  // Histograms, seconds (vLLM's bucket bounds)
  Histogram time_to_first_token{{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
                                 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}};
  Histogram inter_token_latency{{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
                                 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}};
  Histogram e2e_request_latency{{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
                                 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}};

  double kv_cache_usage() const {
    return kv_pages_total == 0 ? 0.0 : double(kv_pages_used) / double(kv_pages_total);
  }
};

}  // namespace fp4::engine
