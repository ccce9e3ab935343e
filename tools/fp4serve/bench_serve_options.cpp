#include "tools/fp4serve/bench_serve_options.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "core/check.h"

namespace fp4::bench_serve {
namespace {

const std::vector<std::string> kMetricNames = {"ttft", "tpot", "itl", "e2el"};

double parse_positive_or_inf(const std::string& text, const char* flag) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  FP4_CHECK(!text.empty() && *end == '\0' && !std::isnan(v) && v > 0,
            "{} must be a positive number or inf, got '{}'", flag, text);
  return v;
}

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (;;) {
    const size_t comma = text.find(',', start);
    std::string part = text.substr(start, comma - start);
    part.erase(0, part.find_first_not_of(" \t"));
    part.erase(part.find_last_not_of(" \t") + 1);
    if (!part.empty()) parts.push_back(part);
    if (comma == std::string::npos) return parts;
    start = comma + 1;
  }
}

}  // namespace

void add_serve_flags(CLI::App& sub, ServeOptions& o) {
  sub.add_option("--base-url", o.base_url,
                 "Server address http://HOST[:PORT][/PREFIX] (default: http://--host:--port)");
  sub.add_option("--host", o.host, "Server host, when --base-url is not given")->capture_default_str();
  sub.add_option("--port", o.port, "Server port, when --base-url is not given")
      ->capture_default_str()->check(CLI::Range(1, 65535));
  sub.add_option("--endpoint", o.endpoint,
                 "Path of the API (default /v1/completions; /v1/chat/completions for openai-chat)");
  sub.add_option("--backend", o.backend,
                 "openai: POST prompts of token ids to /v1/completions; openai-chat: text prompts "
                 "(the ids decoded with --tokenizer) to /v1/chat/completions")
      ->capture_default_str()->check(CLI::IsMember({"openai", "openai-chat"}));
  sub.add_option("--model", o.model, "Model name to request (default: data[0].id of GET /v1/models)");
  sub.add_option("--dataset-name", o.dataset_name, "Dataset; only 'random' for now")
      ->capture_default_str()->check(CLI::IsMember({"random"}));
  sub.add_option("--num-prompts", o.num_prompts, "Number of requests to send")
      ->capture_default_str()->check(CLI::Range(int64_t{1}, int64_t{10'000'000}));
  sub.add_option("--random-input-len", o.random_input_len, "Mean prompt length in tokens (without the prefix)")
      ->capture_default_str()->check(CLI::Range(int64_t{0}, int64_t{100'000'000}));
  sub.add_option("--random-output-len", o.random_output_len, "Mean max_tokens of each request")
      ->capture_default_str()->check(CLI::Range(int64_t{1}, int64_t{100'000'000}));
  sub.add_option("--random-range-ratio", o.random_range_ratio,
                 "r in [0, 1): lengths are integers drawn uniformly from [floor(L(1-r)), ceil(L(1+r))] "
                 "(vLLM's meaning; SGLang's flag of this name draws from [L*r, L])")
      ->capture_default_str();
  sub.add_option("--random-prefix-len", o.random_prefix_len,
                 "Random token ids shared by every prompt, put before its own --random-input-len ids")
      ->capture_default_str()->check(CLI::Range(int64_t{0}, int64_t{100'000'000}));
  sub.add_option("--request-rate", o.request_rate_text,
                 "Requests per second; inf sends every request at t = 0, otherwise arrivals are a "
                 "Poisson process (gamma gaps with --burstiness)")
      ->capture_default_str();
  sub.add_option("--burstiness", o.burstiness_text,
                 "Shape k of the gamma-distributed gaps (mean 1/rate): 1 is Poisson, k < 1 burstier, "
                 "k > 1 more regular, inf equal gaps")
      ->capture_default_str();
  sub.add_option("--max-concurrency", o.max_concurrency,
                 "At most this many requests in flight; later arrivals wait for a slot (0: no limit)")
      ->capture_default_str()->check(CLI::Range(int64_t{0}, int64_t{1'000'000}));
  sub.add_option("--num-warmups", o.num_warmups, "Requests sent (with the first prompt) before the measured run")
      ->capture_default_str()->check(CLI::Range(int64_t{0}, int64_t{1'000'000}));
  sub.add_flag("--ignore-eos", o.ignore_eos, "Ask the server to generate max_tokens whatever it samples");
  sub.add_option("--seed", o.seed, "Seed of every random draw (prompts, lengths, arrival times)")
      ->capture_default_str();
  sub.add_option("--percentile-metrics", o.percentile_metrics_text,
                 "Comma-separated metrics to report percentiles of: ttft, tpot, itl, e2el")
      ->capture_default_str();
  sub.add_option("--metric-percentiles", o.metric_percentiles_text,
                 "Comma-separated percentiles in [0, 100] (numpy's linear interpolation)")
      ->capture_default_str();
  sub.add_flag("--save-result", o.save_result, "Write the results and per-request data as JSON");
  sub.add_option("--result-filename", o.result_filename,
                 "JSON file to write (implies --save-result; default: a name built from the backend, "
                 "rate, concurrency, model and time)");
  sub.add_option("--api-key", o.api_key, "Sent as 'Authorization: Bearer KEY'");
  sub.add_option("--timeout", o.timeout_s, "Seconds a request may take in all before it counts as failed")
      ->capture_default_str()->check(CLI::PositiveNumber);
  sub.add_option("--ready-check-timeout-sec", o.ready_check_timeout_s,
                 "Retry the first test request for up to this many seconds while the server starts "
                 "(0: one attempt)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  sub.add_option("--vocab-size", o.vocab_size, "Prompt ids are drawn from [0, N) when no --tokenizer is given")
      ->capture_default_str()->check(CLI::Range(1, 1 << 30));
  sub.add_option("--tokenizer", o.tokenizer,
                 "tokenizer.json: prompt ids are drawn from its non-special tokens; required by "
                 "openai-chat, whose prompts are the ids decoded to text");
}

void finalize(ServeOptions& o) {
  o.request_rate = parse_positive_or_inf(o.request_rate_text, "--request-rate");
  o.burstiness = parse_positive_or_inf(o.burstiness_text, "--burstiness");
  FP4_CHECK(o.random_range_ratio >= 0.0 && o.random_range_ratio < 1.0,
            "--random-range-ratio must lie in [0, 1), got {}", o.random_range_ratio);
  if (o.endpoint.empty()) o.endpoint = o.backend == "openai-chat" ? "/v1/chat/completions" : "/v1/completions";
  FP4_CHECK(o.endpoint.starts_with("/"), "--endpoint must start with '/', got '{}'", o.endpoint);
  const bool chat = o.backend == "openai-chat";
  FP4_CHECK(!chat || o.endpoint.ends_with("chat/completions"),
            "--backend openai-chat needs an --endpoint ending in chat/completions, got '{}'", o.endpoint);
  FP4_CHECK(chat || !o.endpoint.ends_with("chat/completions"),
            "--endpoint {} is a chat endpoint: use --backend openai-chat", o.endpoint);
  FP4_CHECK(!chat || !o.tokenizer.empty(),
            "--backend openai-chat sends text prompts: give --tokenizer PATH/tokenizer.json to decode the ids");

  o.percentile_metrics = split_commas(o.percentile_metrics_text);
  for (const auto& m : o.percentile_metrics) {
    FP4_CHECK(std::find(kMetricNames.begin(), kMetricNames.end(), m) != kMetricNames.end(),
              "--percentile-metrics: unknown metric '{}' (expected ttft, tpot, itl or e2el)", m);
  }
  o.metric_percentiles.clear();
  for (const auto& text : split_commas(o.metric_percentiles_text)) {
    char* end = nullptr;
    const double p = std::strtod(text.c_str(), &end);
    FP4_CHECK(*end == '\0' && p >= 0.0 && p <= 100.0,
              "--metric-percentiles: '{}' is not a number in [0, 100]", text);
    o.metric_percentiles.push_back(p);
  }
  if (!o.result_filename.empty()) o.save_result = true;
}

std::string effective_base_url(const ServeOptions& o) {
  if (!o.base_url.empty()) return o.base_url;
  // An IPv6 literal needs brackets to keep its colons apart from the port's.
  const bool ipv6 = o.host.find(':') != std::string::npos;
  return ipv6 ? fmt::format("http://[{}]:{}", o.host, o.port) : fmt::format("http://{}:{}", o.host, o.port);
}

}  // namespace fp4::bench_serve
