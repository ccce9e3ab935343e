#include "server/metrics_text.h"

#include <fmt/format.h>

namespace fp4::server {
namespace {

class Writer {
 public:
  explicit Writer(std::string label) : label_(std::move(label)) {}

  void gauge(const char* name, const char* help, double value) {
    head(name, help, "gauge");
    out_ += fmt::format("{}{{{}}} {}\n", name, label_, value);
  }
  void counter(const char* name, const char* help, int64_t value) {
    head(name, help, "counter");
    out_ += fmt::format("{}_total{{{}}} {}\n", name, label_, value);
  }
  void histogram(const char* name, const char* help, const engine::Histogram& h) {
    head(name, help, "histogram");
    int64_t cumulative = 0;
    for (size_t i = 0; i < h.bounds.size(); ++i) {
      cumulative += h.counts[i];
      out_ += fmt::format("{}_bucket{{{},le=\"{}\"}} {}\n", name, label_, h.bounds[i], cumulative);
    }
    out_ += fmt::format("{}_bucket{{{},le=\"+Inf\"}} {}\n", name, label_, h.count);
    out_ += fmt::format("{}_sum{{{}}} {}\n", name, label_, h.sum);
    out_ += fmt::format("{}_count{{{}}} {}\n", name, label_, h.count);
  }
  void raw(const std::string& text) { out_ += text; }
  const std::string& text() const { return out_; }
  const std::string& label() const { return label_; }

 private:
  void head(const char* name, const char* help, const char* type) {
    out_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  }
  std::string label_;
  std::string out_;
};

std::string escape_label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

}  // namespace

std::string render_metrics(const engine::EngineMetrics& m, const std::string& model_name) {
  Writer w(fmt::format("model_name=\"{}\"", escape_label(model_name)));
  w.gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
          static_cast<double>(m.num_running));
  w.gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
          static_cast<double>(m.num_waiting));
  w.gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", m.kv_cache_usage());
  w.counter("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.",
            m.prefix_cache_queries);
  w.counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.",
            m.prefix_cache_hits);
  w.counter("vllm:num_preemptions", "Cumulative number of preemptions from the engine.",
            m.num_preemptions);
  w.counter("vllm:prompt_tokens", "Number of prefill tokens processed.", m.prompt_tokens);
  w.counter("vllm:generation_tokens", "Number of generation tokens processed.", m.generation_tokens);
  w.raw("# HELP vllm:request_success_total Count of successfully processed requests.\n"
        "# TYPE vllm:request_success_total counter\n");
  const std::pair<const char*, int64_t> reasons[] = {{"stop", m.requests_finished_stop},
                                                     {"length", m.requests_finished_length},
                                                     {"abort", m.requests_finished_abort}};
  for (const auto& [reason, count] : reasons) {
    w.raw(fmt::format("vllm:request_success_total{{{},finished_reason=\"{}\"}} {}\n", w.label(),
                      reason, count));
  }
  w.histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
              m.time_to_first_token);
  w.histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
              m.inter_token_latency);
  w.histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
              m.e2e_request_latency);
  // The pool in pages, exactly: kv_cache_usage_perc rounds, and a leak of one page must show.
  w.gauge("fp4serve:kv_cache_pages_total", "Pages in the KV pool.", static_cast<double>(m.kv_pages_total));
  w.gauge("fp4serve:kv_cache_pages_used", "KV pages held by running requests.",
          static_cast<double>(m.kv_pages_used));
  w.counter("fp4serve:engine_steps", "Forward steps the engine has run.", m.steps);
  return w.text();
}

}  // namespace fp4::server
