#include "tools/fp4serve/bench_serve_run.h"

#include <fmt/format.h>

#include <condition_variable>
#include <ctime>
#include <fstream>
#include <mutex>
#include <optional>
#include <thread>

#include "core/check.h"
#include "tokenizer/tokenizer.h"
#include "tools/fp4serve/bench_serve_prometheus.h"
#include "tools/fp4serve/bench_serve_report.h"
#include "tools/fp4serve/bench_serve_request.h"

namespace fp4::bench_serve {
namespace {

constexpr double kScrapeTimeoutS = 10.0;
constexpr auto kRetryInterval = std::chrono::seconds(1);

Clock::duration to_duration(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// Connection refused (the server is still starting) or 503 (it is loading): worth retrying.
bool not_ready_yet(int status) { return status == 0 || status == 503; }

std::string first_model(const HttpClient& client, const std::string& base_url, double ready_timeout_s) {
  const auto give_up = Clock::now() + to_duration(ready_timeout_s);
  for (;;) {
    const HttpResponse r = client.get("/v1/models", kScrapeTimeoutS);
    if (r.status == 200) {
      const auto j = nlohmann::json::parse(r.body, nullptr, /*allow_exceptions=*/false);
      const bool ok = j.is_object() && j.contains("data") && j["data"].is_array() && !j["data"].empty() &&
                      j["data"][0].is_object() && j["data"][0].contains("id") && j["data"][0]["id"].is_string();
      FP4_CHECK(ok, "GET /v1/models did not return data[0].id (give --model): {}", r.body.substr(0, 500));
      return j["data"][0]["id"].get<std::string>();
    }
    if (!not_ready_yet(r.status) || Clock::now() >= give_up) {
      fp4::fail("GET {}/v1/models failed (give --model, or check --base-url): {}", base_url,
                r.error.empty() ? fmt::format("HTTP {} {}", r.status, r.body) : r.error);
    }
    std::this_thread::sleep_for(kRetryInterval);
  }
}

std::optional<std::map<std::string, double>> scrape(const HttpClient& client) {
  const HttpResponse r = client.get("/metrics", kScrapeTimeoutS);
  if (r.status != 200) return std::nullopt;
  return read_counters(r.body, kServerCounters);
}

std::string local_date() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y%m%d-%H%M%S", &tm);
  return text;
}

}  // namespace

std::vector<RequestRecord> run_schedule(const std::vector<Prompt>& prompts,
                                        const std::vector<double>& arrivals, int64_t max_concurrency,
                                        const SendFn& send, double& duration_s) {
  FP4_CHECK(prompts.size() == arrivals.size(), "{} prompts but {} arrival times", prompts.size(), arrivals.size());
  const size_t n = prompts.size();
  std::vector<RequestRecord> records(n);
  std::vector<std::thread> threads(n);
  std::mutex mu;
  std::condition_variable cv;
  int64_t in_flight = 0;
  std::vector<size_t> finished;  // threads to join: a finished thread keeps its stack until joined

  auto reap = [&](std::unique_lock<std::mutex>& lock) {
    std::vector<size_t> done;
    done.swap(finished);
    lock.unlock();
    for (const size_t i : done) threads[i].join();
    lock.lock();
  };

  const Clock::time_point start = Clock::now();
  for (size_t i = 0; i < n; ++i) {
    std::this_thread::sleep_until(start + to_duration(arrivals[i]));
    {
      // Releasing requests in order from this one loop is what makes the wait for a slot first
      // come, first served (vLLM's asyncio semaphore).
      std::unique_lock lock(mu);
      reap(lock);
      if (max_concurrency > 0) cv.wait(lock, [&] { return in_flight < max_concurrency; });
      ++in_flight;
    }
    try {
      threads[i] = std::thread([&, i] {
        RequestRecord record = send(prompts[i], start, arrivals[i]);
        std::lock_guard lock(mu);
        records[i] = std::move(record);
        --in_flight;
        finished.push_back(i);
        cv.notify_all();
      });
    } catch (const std::system_error& e) {
      std::lock_guard lock(mu);
      records[i].scheduled_s = arrivals[i];
      records[i].start_s = std::chrono::duration<double>(Clock::now() - start).count();
      records[i].error = fmt::format("could not start a thread for the request: {}", e.what());
      --in_flight;
    }
  }
  for (auto& t : threads) {
    if (t.joinable()) t.join();
  }
  duration_s = std::chrono::duration<double>(Clock::now() - start).count();
  return records;
}

int run_bench_serve(ServeOptions o) {
  finalize(o);
  const std::string base_url = effective_base_url(o);
  HttpClient client(parse_base_url(base_url), o.api_key);

  std::optional<tokenizer::Tokenizer> tok;
  if (!o.tokenizer.empty()) tok = tokenizer::Tokenizer::from_file(o.tokenizer);
  RunInfo info;
  info.base_url = base_url;
  info.date = local_date();
  info.model = o.model.empty() ? first_model(client, base_url, o.ready_check_timeout_s) : o.model;
  const std::vector<int32_t> allowed = allowed_ids(o.vocab_size, tok ? &*tok : nullptr);
  info.vocab_source = tok ? o.tokenizer : fmt::format("--vocab-size {}", o.vocab_size);
  info.vocab_ids = static_cast<int64_t>(allowed.size());

  Rng rng(o.seed);
  const RandomDatasetSpec spec{o.num_prompts, o.random_input_len, o.random_output_len,
                               o.random_range_ratio, o.random_prefix_len};
  const bool chat = o.backend == "openai-chat";
  const Dataset data = make_random_dataset(spec, allowed, rng, chat ? &*tok : nullptr);
  const std::vector<double> arrivals = arrival_times(rng, o.num_prompts, o.request_rate, o.burstiness);
  if (data.length_mismatches > 0) {
    fmt::print("warning: {} prompts re-encode to a length other than the one drawn ({} tokens in all); "
               "the server's usage.prompt_tokens is what is reported\n",
               data.length_mismatches, data.mismatch_tokens);
  }

  auto send = [&](const Prompt& p, Clock::time_point bench_start, double scheduled_s) {
    return send_request(client, o, info.model, p, bench_start, scheduled_s);
  };

  fmt::print("Model: {}  Server: {}{}\n", info.model, base_url, o.endpoint);
  fmt::print("Starting initial single prompt test run...\n");
  const auto give_up = Clock::now() + to_duration(o.ready_check_timeout_s);
  RequestRecord test = send(data.prompts[0], Clock::now(), 0.0);
  while (!test.success && not_ready_yet(test.http_status) && Clock::now() < give_up) {
    std::this_thread::sleep_for(kRetryInterval);
    test = send(data.prompts[0], Clock::now(), 0.0);
  }
  if (!test.success) {
    fmt::print(stderr, "fp4serve bench serve: the initial test request failed: {}\n", test.error);
    return 1;
  }
  fmt::print("Initial test run completed.\n");

  if (o.num_warmups > 0) {
    fmt::print("Warming up with {} requests...\n", o.num_warmups);
    const std::vector<Prompt> warm(static_cast<size_t>(o.num_warmups), data.prompts[0]);
    double ignored = 0;
    run_schedule(warm, std::vector<double>(warm.size(), 0.0), o.max_concurrency, send, ignored);
    fmt::print("Warmup run completed.\n");
  }

  const auto counters_before = scrape(client);
  fmt::print("Starting main benchmark run...\n");
  fmt::print("Traffic request rate: {}\n", o.request_rate);
  fmt::print("Burstiness factor: {} ({})\n", o.burstiness,
             o.burstiness == 1.0 ? "Poisson process" : "Gamma distribution");
  fmt::print("Maximum request concurrency: {}\n",
             o.max_concurrency > 0 ? fmt::format("{}", o.max_concurrency) : "None");
  std::fflush(stdout);
  double duration_s = 0;
  const std::vector<RequestRecord> records = run_schedule(data.prompts, arrivals, o.max_concurrency, send, duration_s);
  const auto counters_after = scrape(client);
  if (counters_before && counters_after) {
    auto deltas = counter_deltas(*counters_before, *counters_after);
    if (!deltas.empty()) info.server_deltas = std::move(deltas);  // a server without them: skip quietly
  }

  const Summary summary = summarize(records, duration_s, o.metric_percentiles);
  if (summary.failed > 0) {
    fmt::print("Failed requests during benchmark run detected (capping to 10):\n");
    int shown = 0;
    for (const auto& r : records) {
      if (r.success) continue;
      fmt::print("Error {}: {}\n", shown, r.error);
      if (++shown == 10) break;
    }
  }
  print_report(stdout, summary, o, info);
  if (o.save_result) {
    const std::string path = o.result_filename.empty() ? default_result_filename(o, info) : o.result_filename;
    std::ofstream file(path);
    FP4_CHECK(file.good(), "--result-filename: cannot write {}", path);
    file << result_json(summary, records, data, o, info).dump(2) << "\n";
    FP4_CHECK(file.good(), "--result-filename: writing {} failed", path);
    fmt::print("Results written to {}\n", path);
  }
  if (summary.completed == 0) {
    fmt::print(stderr, "fp4serve bench serve: every request failed\n");
    return 1;
  }
  return 0;
}

}  // namespace fp4::bench_serve
