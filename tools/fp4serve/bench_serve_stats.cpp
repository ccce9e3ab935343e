#include "tools/fp4serve/bench_serve_stats.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace fp4::bench_serve {

double percentile(std::vector<double> values, double p) {
  FP4_CHECK(!values.empty(), "percentile of no values");
  FP4_CHECK(p >= 0.0 && p <= 100.0, "percentile {} outside [0, 100]", p);
  std::sort(values.begin(), values.end());
  const double h = static_cast<double>(values.size() - 1) * p / 100.0;
  const auto lo = static_cast<size_t>(std::floor(h));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  const double t = h - static_cast<double>(lo);
  return values[lo] + (values[hi] - values[lo]) * t;
}

Distribution describe(const std::vector<double>& values_s, const std::vector<double>& percentiles) {
  Distribution d;
  if (values_s.empty()) {
    for (const double p : percentiles) d.percentiles_ms.emplace_back(p, 0.0);
    return d;
  }
  const auto n = static_cast<double>(values_s.size());
  double sum = 0;
  for (const double v : values_s) sum += v;
  const double mean = sum / n;
  double squares = 0;
  for (const double v : values_s) squares += (v - mean) * (v - mean);
  d.mean_ms = mean * 1000.0;
  d.std_ms = std::sqrt(squares / n) * 1000.0;
  d.median_ms = percentile(values_s, 50.0) * 1000.0;
  for (const double p : percentiles) d.percentiles_ms.emplace_back(p, percentile(values_s, p) * 1000.0);
  return d;
}

Peaks peaks(const std::vector<RequestRecord>& records) {
  Peaks out;
  double min_start = INFINITY;
  double max_end = -INFINITY;
  for (const auto& r : records) {
    if (!r.success) continue;
    min_start = std::min(min_start, r.start_s);
    max_end = std::max(max_end, r.start_s + r.e2el_s);
  }
  if (std::isinf(min_start)) return out;
  const auto buckets = static_cast<size_t>(std::ceil(max_end - min_start)) + 1;
  out.tokens_per_bucket.assign(buckets, 0.0);
  out.requests_per_bucket.assign(buckets, 0.0);
  // Bucket of a time t: int(t - min_start), truncation as in Python's int().
  auto bucket = [&](double t) { return static_cast<int64_t>(t - min_start); };
  for (const auto& r : records) {
    if (!r.success) continue;
    double t = r.start_s + r.ttft_s;
    auto count_token = [&](double time) {
      const int64_t b = bucket(time);
      if (b >= 0 && b < static_cast<int64_t>(buckets)) out.tokens_per_bucket[static_cast<size_t>(b)] += 1;
    };
    count_token(t);
    for (const double gap : r.itl_s) {
      t += gap;
      count_token(t);
    }
    const int64_t first = bucket(r.start_s);
    const int64_t last = std::min<int64_t>(bucket(r.start_s + r.e2el_s), static_cast<int64_t>(buckets) - 1);
    for (int64_t b = std::max<int64_t>(first, 0); b <= last; ++b) out.requests_per_bucket[static_cast<size_t>(b)] += 1;
  }
  out.output_tokens_per_s = *std::max_element(out.tokens_per_bucket.begin(), out.tokens_per_bucket.end());
  out.concurrent_requests = static_cast<int64_t>(
      *std::max_element(out.requests_per_bucket.begin(), out.requests_per_bucket.end()));
  return out;
}

Summary summarize(const std::vector<RequestRecord>& records, double duration_s,
                  const std::vector<double>& percentiles) {
  FP4_CHECK(duration_s > 0, "benchmark duration must be positive, got {} s", duration_s);
  Summary s;
  s.duration_s = duration_s;
  std::vector<double> ttfts, tpots, itls, e2els, queues;
  for (const auto& r : records) {
    queues.push_back(r.start_s - r.scheduled_s);
    if (!r.success) {
      ++s.failed;
      continue;
    }
    ++s.completed;
    s.total_input += r.prompt_len;
    s.total_output += r.output_tokens;
    if (r.output_from_usage) ++s.output_from_usage;
    ttfts.push_back(r.ttft_s);
    e2els.push_back(r.e2el_s);
    itls.insert(itls.end(), r.itl_s.begin(), r.itl_s.end());
    if (r.output_tokens > 1) tpots.push_back((r.e2el_s - r.ttft_s) / static_cast<double>(r.output_tokens - 1));
  }
  s.request_throughput = static_cast<double>(s.completed) / duration_s;
  s.output_throughput = static_cast<double>(s.total_output) / duration_s;
  s.total_token_throughput = static_cast<double>(s.total_input + s.total_output) / duration_s;
  s.peak = peaks(records);
  s.ttft = describe(ttfts, percentiles);
  s.tpot = describe(tpots, percentiles);
  s.itl = describe(itls, percentiles);
  s.e2el = describe(e2els, percentiles);
  s.queue = describe(queues, percentiles);
  return s;
}

}  // namespace fp4::bench_serve
