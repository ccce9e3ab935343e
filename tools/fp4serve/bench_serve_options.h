// The flags of `fp4serve bench serve`, spelled and defaulted as `vllm bench serve` spells them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace fp4::bench_serve {

struct ServeOptions {
  // As given on the command line.
  std::string base_url;  // empty: http://HOST:PORT from --host and --port
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string endpoint;  // empty: /v1/completions, or /v1/chat/completions for openai-chat
  std::string backend = "openai";
  std::string model;  // empty: data[0].id of GET /v1/models
  std::string dataset_name = "random";
  int64_t num_prompts = 1000;
  int64_t random_input_len = 1024;
  int64_t random_output_len = 128;
  double random_range_ratio = 0.0;
  int64_t random_prefix_len = 0;
  std::string request_rate_text = "inf";
  std::string burstiness_text = "1.0";
  int64_t max_concurrency = 0;  // 0: no limit
  int64_t num_warmups = 0;
  bool ignore_eos = false;
  uint64_t seed = 0;
  std::string percentile_metrics_text = "ttft,tpot,itl,e2el";
  std::string metric_percentiles_text = "99";
  bool save_result = false;
  std::string result_filename;
  std::string api_key;
  double timeout_s = 6 * 3600.0;  // vLLM's aiohttp total timeout
  double ready_check_timeout_s = 600.0;
  int32_t vocab_size = 256;
  std::string tokenizer;  // path to tokenizer.json

  // Filled by finalize().
  double request_rate = 0;  // +inf: every request at t = 0
  double burstiness = 1.0;
  std::vector<std::string> percentile_metrics;  // a subset of ttft, tpot, itl, e2el
  std::vector<double> metric_percentiles;
};

// Adds every flag to `sub`, bound to `options`.
void add_serve_flags(CLI::App& sub, ServeOptions& options);

// Parses the text-valued flags, fills the defaults that depend on other flags and checks every
// value, throwing an fp4::Error that names the flag and the value.
void finalize(ServeOptions& options);

// "http://HOST:PORT" from --host/--port unless --base-url was given.
std::string effective_base_url(const ServeOptions& options);

}  // namespace fp4::bench_serve
