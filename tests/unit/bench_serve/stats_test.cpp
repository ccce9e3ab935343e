// The statistics of `fp4serve bench serve` against values worked out by hand (and checked with
// numpy where numpy defines them); every expected number is derived in the comment beside it.
#include <gtest/gtest.h>

#include <cmath>

#include "tools/fp4serve/bench_serve_stats.h"

namespace fp4::bench_serve {
namespace {

// Sums of a few doubles: the only error is rounding, a few ulps of values near 1 s.
constexpr double kTight = 1e-12;

TEST(BenchServeStats, PercentileIsNumpyLinear) {
  // Sorted: 15 20 35 40 50, n = 5, rank h = 4 p / 100.
  const std::vector<double> x = {35, 15, 50, 20, 40};
  EXPECT_DOUBLE_EQ(percentile(x, 0), 15.0);
  EXPECT_DOUBLE_EQ(percentile(x, 40), 29.0);    // h = 1.6: 20 + 0.6 (35 - 20)
  EXPECT_DOUBLE_EQ(percentile(x, 50), 35.0);    // h = 2
  EXPECT_DOUBLE_EQ(percentile(x, 99), 49.6);    // h = 3.96: 40 + 0.96 (50 - 40)
  EXPECT_NEAR(percentile(x, 99.9), 49.96, 1e-12);  // numpy: 49.96000000000001
  EXPECT_DOUBLE_EQ(percentile(x, 100), 50.0);
  EXPECT_DOUBLE_EQ(percentile({7.0}, 99), 7.0);
}

TEST(BenchServeStats, DescribeUsesPopulationStdAndMilliseconds) {
  // 1, 2, 3, 4 ms: mean 2.5; deviations 1.5 0.5 0.5 1.5, mean square 1.25, std sqrt(1.25).
  const Distribution d = describe({0.004, 0.001, 0.003, 0.002}, {50, 99});
  EXPECT_NEAR(d.mean_ms, 2.5, kTight);
  EXPECT_NEAR(d.median_ms, 2.5, kTight);
  EXPECT_NEAR(d.std_ms, std::sqrt(1.25), kTight);
  ASSERT_EQ(d.percentiles_ms.size(), 2u);
  EXPECT_NEAR(d.percentiles_ms[1].second, 3.97, 1e-9);  // h = 2.97: 3 + 0.97 (4 - 3)
}

TEST(BenchServeStats, EmptyDistributionIsZeroAsInVllm) {
  const Distribution d = describe({}, {99});
  EXPECT_EQ(d.mean_ms, 0.0);
  EXPECT_EQ(d.std_ms, 0.0);
  ASSERT_EQ(d.percentiles_ms.size(), 1u);
  EXPECT_EQ(d.percentiles_ms[0].second, 0.0);
}

RequestRecord ok(double start, double ttft, std::vector<double> itl, int64_t out, int64_t prompt) {
  RequestRecord r;
  r.success = true;
  r.start_s = start;
  r.scheduled_s = start;
  r.ttft_s = ttft;
  r.itl_s = std::move(itl);
  double e2el = ttft;
  for (double g : r.itl_s) e2el += g;
  r.e2el_s = e2el;
  r.output_tokens = out;
  r.output_from_usage = true;
  r.prompt_len = prompt;
  return r;
}

TEST(BenchServeStats, TpotItlAndThroughput) {
  std::vector<RequestRecord> records;
  // TTFT 0.1, four gaps of 0.1: E2EL 0.5, 5 tokens, TPOT (0.5 - 0.1) / 4 = 0.1 s.
  records.push_back(ok(0.0, 0.1, {0.1, 0.1, 0.1, 0.1}, 5, 10));
  // One token: no TPOT (vLLM leaves it out), no ITL; TTFT 0.3.
  records.push_back(ok(0.0, 0.3, {}, 1, 20));
  // A server that packs tokens: 2 events, 9 tokens by usage. TPOT (0.4 - 0.2) / 8 = 0.025 s;
  // its one ITL gap is 0.2 s.
  records.push_back(ok(0.0, 0.2, {0.2}, 9, 30));
  RequestRecord failed;
  failed.error = "HTTP 500";
  failed.prompt_len = 1000;
  records.push_back(failed);

  const Summary s = summarize(records, /*duration_s=*/2.0, {50});
  EXPECT_EQ(s.completed, 3);
  EXPECT_EQ(s.failed, 1);
  EXPECT_EQ(s.total_input, 60);   // 10 + 20 + 30; the failed request does not count
  EXPECT_EQ(s.total_output, 15);  // 5 + 1 + 9
  EXPECT_NEAR(s.request_throughput, 1.5, kTight);
  EXPECT_NEAR(s.output_throughput, 7.5, kTight);
  EXPECT_NEAR(s.total_token_throughput, 37.5, kTight);
  // TPOT values 100 and 25 ms: mean 62.5, std 37.5.
  EXPECT_NEAR(s.tpot.mean_ms, 62.5, 1e-9);
  EXPECT_NEAR(s.tpot.std_ms, 37.5, 1e-9);
  // ITL pools 0.1 x4 and 0.2: mean 0.6 / 5 = 0.12 s, median 0.1 s.
  EXPECT_NEAR(s.itl.mean_ms, 120.0, 1e-9);
  EXPECT_NEAR(s.itl.median_ms, 100.0, 1e-9);
  // TTFT 0.1, 0.3, 0.2: mean 0.2 s.
  EXPECT_NEAR(s.ttft.mean_ms, 200.0, 1e-9);
  // E2EL 0.5, 0.3, 0.4: median 0.4 s.
  EXPECT_NEAR(s.e2el.median_ms, 400.0, 1e-9);
}

TEST(BenchServeStats, PeakBucketsAsVllm) {
  // Request A starts at 0: token events at 0.5 0.8 1.1 1.4, ends at 1.4.
  // Request B starts at 1.2: token events at 1.3 1.4 1.5, ends at 1.5.
  // Buckets from the earliest start: ceil(1.5 - 0) + 1 = 3.
  //   tokens: [0,1) 0.5 0.8 -> 2; [1,2) 1.1 1.4 1.3 1.4 1.5 -> 5; [2,3) -> 0.
  //   requests: A in buckets 0..1, B in bucket 1 -> [1, 2, 0].
  std::vector<RequestRecord> records = {ok(0.0, 0.5, {0.3, 0.3, 0.3}, 4, 1),
                                        ok(1.2, 0.1, {0.1, 0.1}, 3, 1)};
  RequestRecord failed;  // failed requests never count
  failed.start_s = 5.0;
  records.push_back(failed);
  const Peaks p = peaks(records);
  ASSERT_EQ(p.tokens_per_bucket.size(), 3u);
  EXPECT_EQ(p.tokens_per_bucket, (std::vector<double>{2, 5, 0}));
  EXPECT_EQ(p.requests_per_bucket, (std::vector<double>{1, 2, 0}));
  EXPECT_EQ(p.output_tokens_per_s, 5.0);
  EXPECT_EQ(p.concurrent_requests, 2);
}

TEST(BenchServeStats, QueueTimeIsStartMinusScheduled) {
  RequestRecord r = ok(0.5, 0.1, {}, 1, 1);
  r.scheduled_s = 0.2;  // waited 0.3 s for a concurrency slot
  const Summary s = summarize({r}, 1.0, {99});
  EXPECT_NEAR(s.queue.mean_ms, 300.0, 1e-9);
}

}  // namespace
}  // namespace fp4::bench_serve
