#include "tools/fp4serve/bench_serve_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace fp4::bench_serve {
namespace {

struct MetricInfo {
  const char* key;     // ttft, tpot, itl, e2el
  const char* label;   // as in vLLM's printed names
  const char* header;  // the section rule's title
  const Distribution Summary::*field;
};

constexpr MetricInfo kMetrics[] = {
    {"ttft", "TTFT", "Time to First Token", &Summary::ttft},
    {"tpot", "TPOT", "Time per Output Token (excl. 1st token)", &Summary::tpot},
    {"itl", "ITL", "Inter-token Latency", &Summary::itl},
    {"e2el", "E2EL", "End-to-end Latency", &Summary::e2el},
};

// 99 -> "99", 99.9 -> "99.9": vLLM's p_word.
std::string percentile_word(double p) {
  return p == std::floor(p) ? fmt::format("{}", static_cast<int64_t>(p)) : fmt::format("{}", p);
}

std::string rule(const std::string& title, char fill) {
  const size_t width = 50;
  if (title.size() >= width) return title;
  const size_t left = (width - title.size()) / 2;  // Python's str.center puts the odd fill right
  return std::string(left, fill) + title + std::string(width - title.size() - left, fill);
}

void line(std::FILE* out, const std::string& name, const std::string& value) {
  fmt::print(out, "{:<40} {:<10}\n", name, value);
}

std::string number_text(double v) {
  return std::isinf(v) ? std::string("inf") : fmt::format("{}", v);
}

bool selected(const ServeOptions& o, const char* key) {
  return std::find(o.percentile_metrics.begin(), o.percentile_metrics.end(), key) != o.percentile_metrics.end();
}

void print_distribution(std::FILE* out, const std::string& header, const std::string& label,
                        const Distribution& d) {
  fmt::print(out, "{}\n", rule(header, '-'));
  line(out, fmt::format("Mean {} (ms):", label), fmt::format("{:.2f}", d.mean_ms));
  line(out, fmt::format("Median {} (ms):", label), fmt::format("{:.2f}", d.median_ms));
  line(out, fmt::format("Std {} (ms):", label), fmt::format("{:.2f}", d.std_ms));
  for (const auto& [p, v] : d.percentiles_ms) {
    line(out, fmt::format("P{} {} (ms):", percentile_word(p), label), fmt::format("{:.2f}", v));
  }
}

}  // namespace

void print_report(std::FILE* out, const Summary& s, const ServeOptions& o, const RunInfo& info) {
  fmt::print(out, "{}\n", rule(" Serving Benchmark Result ", '='));
  line(out, "Successful requests:", fmt::format("{}", s.completed));
  line(out, "Failed requests:", fmt::format("{}", s.failed));
  if (o.max_concurrency > 0) line(out, "Maximum request concurrency:", fmt::format("{}", o.max_concurrency));
  line(out, "Request rate configured (RPS):", fmt::format("{:.2f}", o.request_rate));
  line(out, "Benchmark duration (s):", fmt::format("{:.2f}", s.duration_s));
  line(out, "Total input tokens:", fmt::format("{}", s.total_input));
  line(out, "Total generated tokens:", fmt::format("{}", s.total_output));
  line(out, "Request throughput (req/s):", fmt::format("{:.2f}", s.request_throughput));
  line(out, "Output token throughput (tok/s):", fmt::format("{:.2f}", s.output_throughput));
  line(out, "Peak output token throughput (tok/s):", fmt::format("{:.2f}", s.peak.output_tokens_per_s));
  line(out, "Peak concurrent requests:", fmt::format("{:.2f}", static_cast<double>(s.peak.concurrent_requests)));
  line(out, "Total Token throughput (tok/s):", fmt::format("{:.2f}", s.total_token_throughput));
  for (const MetricInfo& m : kMetrics) {
    if (selected(o, m.key)) print_distribution(out, m.header, m.label, s.*m.field);
  }
  if (o.max_concurrency > 0) print_distribution(out, "Client Queue Time", "queue time", s.queue);
  if (info.server_deltas) {
    fmt::print(out, "{}\n", rule("Server Counters (change over the run)", '-'));
    const auto& d = *info.server_deltas;
    auto get = [&](const char* name) -> std::optional<double> {
      auto it = d.find(name);
      return it == d.end() ? std::nullopt : std::optional<double>(it->second);
    };
    const auto hits = get("vllm:prefix_cache_hits_total");
    const auto queries = get("vllm:prefix_cache_queries_total");
    if (queries) line(out, "Prefix cache queries (tokens):", fmt::format("{:.0f}", *queries));
    if (hits) line(out, "Prefix cache hits (tokens):", fmt::format("{:.0f}", *hits));
    if (hits && queries && *queries > 0) {
      line(out, "Prefix cache hit rate (%):", fmt::format("{:.2f}", 100.0 * *hits / *queries));
    }
    if (auto pre = get("vllm:num_preemptions_total")) line(out, "Preemptions:", fmt::format("{:.0f}", *pre));
  }
  fmt::print(out, "{}\n", std::string(50, '='));
  if (s.completed > s.output_from_usage) {
    fmt::print(out, "note: {} of {} successful requests sent no usage chunk; their output tokens are "
               "the number of token events\n", s.completed - s.output_from_usage, s.completed);
  }
}

nlohmann::json result_json(const Summary& s, const std::vector<RequestRecord>& records,
                           const Dataset& dataset, const ServeOptions& o, const RunInfo& info) {
  using nlohmann::json;
  const LengthRange in = input_len_range(o.random_input_len, o.random_range_ratio);
  const LengthRange out = output_len_range(o.random_output_len, o.random_range_ratio);
  json j;
  j["date"] = info.date;
  j["backend"] = o.backend;
  j["endpoint"] = o.endpoint;
  j["base_url"] = info.base_url;
  j["model_id"] = info.model;
  j["tokenizer_id"] = o.tokenizer;
  j["num_prompts"] = o.num_prompts;
  // JSON has no infinity: an infinite rate or burstiness is written as the string "inf".
  auto number_or_inf = [](double v) { return std::isinf(v) ? json("inf") : json(v); };
  j["request_rate"] = number_or_inf(o.request_rate);
  j["burstiness"] = number_or_inf(o.burstiness);
  j["max_concurrency"] = o.max_concurrency > 0 ? json(o.max_concurrency) : json(nullptr);
  j["workload"] = {
      {"dataset_name", o.dataset_name},
      {"random_input_len", o.random_input_len},
      {"random_output_len", o.random_output_len},
      {"random_prefix_len", o.random_prefix_len},
      {"random_range_ratio", o.random_range_ratio},
      {"range_ratio_semantics", "vLLM: integer lengths uniform in [floor(L(1-r)), ceil(L(1+r))]"},
      {"input_len_range", {in.lo, in.hi}},
      {"output_len_range", {out.lo, out.hi}},
      {"prefix_shared_fraction",
       o.random_prefix_len + o.random_input_len > 0
           ? static_cast<double>(o.random_prefix_len) / static_cast<double>(o.random_prefix_len + o.random_input_len)
           : 0.0},
      {"prompt_format", o.backend == "openai-chat" ? "text (ids decoded)" : "token ids"},
      {"vocab_source", info.vocab_source},
      {"vocab_ids", info.vocab_ids},
      {"text_length_mismatches", dataset.length_mismatches},
      {"seed", o.seed},
      {"ignore_eos", o.ignore_eos},
      {"num_warmups", o.num_warmups},
      {"arrivals", std::isinf(o.request_rate) ? "all at t=0"
                   : o.burstiness == 1.0     ? "Poisson process"
                                             : "gamma-distributed gaps"},
  };
  j["duration"] = s.duration_s;
  j["completed"] = s.completed;
  j["failed"] = s.failed;
  j["total_input_tokens"] = s.total_input;
  j["total_output_tokens"] = s.total_output;
  j["output_tokens_from_usage"] = s.output_from_usage;
  j["request_throughput"] = s.request_throughput;
  j["output_throughput"] = s.output_throughput;
  j["total_token_throughput"] = s.total_token_throughput;
  j["max_output_tokens_per_s"] = s.peak.output_tokens_per_s;
  j["max_concurrent_requests"] = s.peak.concurrent_requests;
  for (const MetricInfo& m : kMetrics) {
    const Distribution& d = s.*m.field;
    j[fmt::format("mean_{}_ms", m.key)] = d.mean_ms;
    j[fmt::format("median_{}_ms", m.key)] = d.median_ms;
    j[fmt::format("std_{}_ms", m.key)] = d.std_ms;
    for (const auto& [p, v] : d.percentiles_ms) j[fmt::format("p{}_{}_ms", percentile_word(p), m.key)] = v;
  }
  j["mean_queue_ms"] = s.queue.mean_ms;
  j["median_queue_ms"] = s.queue.median_ms;
  j["server_metrics"] = info.server_deltas ? json(*info.server_deltas) : json(nullptr);

  // Per request, in dataset order; times in seconds as vLLM stores them.
  json ttfts = json::array(), itls = json::array(), e2els = json::array(), input_lens = json::array(),
       output_lens = json::array(), requested = json::array(), errors = json::array(),
       starts = json::array(), scheduled = json::array();
  for (size_t i = 0; i < records.size(); ++i) {
    const RequestRecord& r = records[i];
    ttfts.push_back(r.ttft_s);
    itls.push_back(r.itl_s);
    e2els.push_back(r.e2el_s);
    input_lens.push_back(r.prompt_len);
    output_lens.push_back(r.success ? r.output_tokens : 0);
    requested.push_back(dataset.prompts[i].output_len);
    errors.push_back(r.error);
    starts.push_back(r.start_s);
    scheduled.push_back(r.scheduled_s);
  }
  j["ttfts"] = std::move(ttfts);
  j["itls"] = std::move(itls);
  j["e2els"] = std::move(e2els);
  j["input_lens"] = std::move(input_lens);
  j["output_lens"] = std::move(output_lens);
  j["requested_output_lens"] = std::move(requested);
  j["errors"] = std::move(errors);
  j["start_times"] = std::move(starts);
  j["scheduled_times"] = std::move(scheduled);
  return j;
}

std::string default_result_filename(const ServeOptions& o, const RunInfo& info) {
  std::string model = info.model;
  std::replace(model.begin(), model.end(), '/', '_');
  const std::string concurrency = o.max_concurrency > 0 ? fmt::format("{}", o.max_concurrency) : "none";
  return fmt::format("{}-{}qps-concurrency{}-{}-{}.json", o.backend, number_text(o.request_rate),
                     concurrency, model, info.date);
}

}  // namespace fp4::bench_serve
