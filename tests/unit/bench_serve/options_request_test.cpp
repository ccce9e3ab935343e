// Flags, base URLs, request bodies, /metrics counters, and the release schedule with a
// concurrency limit.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/check.h"
#include "tools/fp4serve/bench_serve_http.h"
#include "tools/fp4serve/bench_serve_options.h"
#include "tools/fp4serve/bench_serve_prometheus.h"
#include "tools/fp4serve/bench_serve_request.h"
#include "tools/fp4serve/bench_serve_run.h"

namespace fp4::bench_serve {
namespace {

TEST(BenchServeOptions, FinalizeParsesAndDefaults) {
  ServeOptions o;
  finalize(o);
  EXPECT_TRUE(std::isinf(o.request_rate));
  EXPECT_EQ(o.burstiness, 1.0);
  EXPECT_EQ(o.endpoint, "/v1/completions");
  EXPECT_EQ(o.percentile_metrics, (std::vector<std::string>{"ttft", "tpot", "itl", "e2el"}));
  EXPECT_EQ(o.metric_percentiles, (std::vector<double>{99}));
  EXPECT_EQ(effective_base_url(o), "http://127.0.0.1:8000");

  ServeOptions chat;
  chat.backend = "openai-chat";
  chat.tokenizer = "tokenizer.json";
  chat.request_rate_text = "12.5";
  chat.metric_percentiles_text = "50, 90,99.9";
  chat.result_filename = "out.json";
  chat.host = "::1";
  finalize(chat);
  EXPECT_EQ(chat.endpoint, "/v1/chat/completions");
  EXPECT_EQ(chat.request_rate, 12.5);
  EXPECT_EQ(chat.metric_percentiles, (std::vector<double>{50, 90, 99.9}));
  EXPECT_TRUE(chat.save_result);
  EXPECT_EQ(effective_base_url(chat), "http://[::1]:8000");
}

TEST(BenchServeOptions, FinalizeRejectsBadValues) {
  auto rejects = [](auto edit) {
    ServeOptions o;
    edit(o);
    EXPECT_THROW(finalize(o), fp4::Error);
  };
  rejects([](ServeOptions& o) { o.request_rate_text = "fast"; });
  rejects([](ServeOptions& o) { o.request_rate_text = "0"; });
  rejects([](ServeOptions& o) { o.burstiness_text = "-1"; });
  rejects([](ServeOptions& o) { o.random_range_ratio = 1.0; });
  rejects([](ServeOptions& o) { o.percentile_metrics_text = "ttft,latency"; });
  rejects([](ServeOptions& o) { o.metric_percentiles_text = "101"; });
  rejects([](ServeOptions& o) { o.backend = "openai-chat"; });  // no --tokenizer
  rejects([](ServeOptions& o) { o.endpoint = "/v1/chat/completions"; });  // with backend openai
}

TEST(BenchServeHttp, ParseBaseUrl) {
  BaseUrl u = parse_base_url("http://localhost:1234/prefix/");
  EXPECT_EQ(u.host, "localhost");
  EXPECT_EQ(u.port, 1234);
  EXPECT_EQ(u.path_prefix, "/prefix");
  u = parse_base_url("http://example.org");
  EXPECT_EQ(u.port, 80);
  EXPECT_EQ(u.path_prefix, "");
  u = parse_base_url("http://[::1]:8000");
  EXPECT_EQ(u.host, "::1");
  EXPECT_EQ(u.port, 8000);
  EXPECT_THROW(parse_base_url("https://example.org"), fp4::Error);
  EXPECT_THROW(parse_base_url("example.org:80"), fp4::Error);
  EXPECT_THROW(parse_base_url("http://host:0"), fp4::Error);
  EXPECT_THROW(parse_base_url("http://host:80x"), fp4::Error);
}

TEST(BenchServeRequest, CompletionBodyCarriesIds) {
  ServeOptions o;
  o.ignore_eos = true;
  finalize(o);
  Prompt p;
  p.ids = {5, 6, 7};
  p.input_len = 3;
  p.output_len = 9;
  const auto j = nlohmann::json::parse(request_body(o, "m", p));
  EXPECT_EQ(j["model"], "m");
  EXPECT_EQ(j["prompt"], nlohmann::json::array({5, 6, 7}));
  EXPECT_EQ(j["max_tokens"], 9);
  EXPECT_EQ(j["stream"], true);
  EXPECT_EQ(j["stream_options"]["include_usage"], true);
  EXPECT_EQ(j["temperature"], 0.0);
  EXPECT_EQ(j["ignore_eos"], true);
  EXPECT_FALSE(j.contains("messages"));
}

TEST(BenchServeRequest, ChatBodyCarriesText) {
  ServeOptions o;
  o.backend = "openai-chat";
  o.tokenizer = "t.json";
  finalize(o);
  Prompt p;
  p.text = "hello \xff";  // invalid UTF-8 (a cut byte-fallback token) is replaced, not refused
  p.output_len = 4;
  const auto j = nlohmann::json::parse(request_body(o, "m", p));
  EXPECT_EQ(j["messages"][0]["role"], "user");
  EXPECT_EQ(j["messages"][0]["content"], "hello \xef\xbf\xbd");
  EXPECT_EQ(j["max_tokens"], 4);
  EXPECT_EQ(j["max_completion_tokens"], 4);
  EXPECT_FALSE(j.contains("prompt"));
  EXPECT_FALSE(j.contains("ignore_eos"));
}

TEST(BenchServePrometheus, SumsLabelSetsAndDiffs) {
  const std::string before =
      "# HELP vllm:prefix_cache_hits_total Prefix cache hits, in tokens.\n"
      "# TYPE vllm:prefix_cache_hits_total counter\n"
      "vllm:prefix_cache_hits_total{engine=\"0\",model_name=\"m\"} 100.0\n"
      "vllm:prefix_cache_hits_total{engine=\"1\",model_name=\"odd } \\\" name\"} 28 1700000000000\n"
      "vllm:prefix_cache_queries_total 1000\r\n"
      "vllm:prefix_cache_queries_created 17\n"  // another sample of the same family: ignored
      "vllm:num_requests_running 3\n"
      "garbage line\n";
  const std::string after =
      "vllm:prefix_cache_hits_total{engine=\"0\",model_name=\"m\"} 400\n"
      "vllm:prefix_cache_hits_total{engine=\"1\",model_name=\"m\"} 128\n"
      "vllm:prefix_cache_queries_total 2.5e3\n"
      "vllm:num_preemptions_total 4\n";
  const auto b = read_counters(before, kServerCounters);
  const auto a = read_counters(after, kServerCounters);
  EXPECT_EQ(b.at("vllm:prefix_cache_hits_total"), 128.0);  // 100 + 28
  EXPECT_EQ(b.at("vllm:prefix_cache_queries_total"), 1000.0);
  EXPECT_FALSE(b.contains("vllm:num_preemptions_total"));
  const auto d = counter_deltas(b, a);
  EXPECT_EQ(d.at("vllm:prefix_cache_hits_total"), 400.0);    // 528 - 128
  EXPECT_EQ(d.at("vllm:prefix_cache_queries_total"), 1500.0);
  EXPECT_FALSE(d.contains("vllm:num_preemptions_total"));    // absent before: no difference
}

TEST(BenchServeSchedule, ConcurrencyLimitIsFirstComeFirstServed) {
  // Six requests all released at t = 0 with at most two in flight, each taking 100 ms: no more
  // than two may ever run together, they start in order, and the later ones queue.
  std::vector<Prompt> prompts(6);
  for (size_t i = 0; i < prompts.size(); ++i) prompts[i].input_len = static_cast<int64_t>(i);
  std::atomic<int> running{0}, most{0};
  const SendFn send = [&](const Prompt& p, Clock::time_point start, double scheduled) {
    RequestRecord r;
    r.scheduled_s = scheduled;
    r.start_s = std::chrono::duration<double>(Clock::now() - start).count();
    const int now = ++running;
    int seen = most.load();
    while (now > seen && !most.compare_exchange_weak(seen, now)) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    --running;
    r.success = true;
    r.prompt_len = p.input_len;
    return r;
  };
  double duration = 0;
  const auto records = run_schedule(prompts, std::vector<double>(6, 0.0), 2, send, duration);
  EXPECT_EQ(most.load(), 2);
  ASSERT_EQ(records.size(), 6u);
  for (size_t i = 0; i < records.size(); ++i) {
    EXPECT_EQ(records[i].prompt_len, static_cast<int64_t>(i));  // records in prompt order
    // Waves of two: request i waits for i - 1 earlier ones to finish, so it starts no earlier
    // than 100 ms per full wave before it. Two requests of one wave may start in either order,
    // but a request never starts before one of an earlier wave (first come, first served).
    EXPECT_GE(records[i].start_s, 0.1 * static_cast<double>(i / 2));
    if (i + 2 < records.size()) {
      EXPECT_LE(records[i].start_s, records[i + 2].start_s);
    }
  }
  EXPECT_GE(duration, 0.3);  // three waves of 100 ms
}

TEST(BenchServeSchedule, ArrivalsAreHonoured) {
  std::vector<Prompt> prompts(3);
  const SendFn send = [](const Prompt&, Clock::time_point start, double scheduled) {
    RequestRecord r;
    r.scheduled_s = scheduled;
    r.start_s = std::chrono::duration<double>(Clock::now() - start).count();
    r.success = true;
    return r;
  };
  double duration = 0;
  const auto records = run_schedule(prompts, {0.0, 0.05, 0.12}, 0, send, duration);
  for (const auto& r : records) EXPECT_GE(r.start_s, r.scheduled_s);
  EXPECT_GE(duration, 0.12);
}

}  // namespace
}  // namespace fp4::bench_serve
