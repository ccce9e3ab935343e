// The result of `fp4serve bench serve`: the "Serving Benchmark Result" block, laid out as
// `vllm bench serve` prints it, and the JSON file, with vLLM's key names where vLLM has the same
// quantity.
#pragma once

#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tools/fp4serve/bench_serve_dataset.h"
#include "tools/fp4serve/bench_serve_options.h"
#include "tools/fp4serve/bench_serve_stats.h"

namespace fp4::bench_serve {

struct RunInfo {
  std::string model;
  std::string base_url;
  std::string date;          // local time, YYYYMMDD-HHMMSS
  std::string vocab_source;  // "--vocab-size N" or the tokenizer's path
  int64_t vocab_ids = 0;     // how many ids prompts were drawn from
  // The change of each server counter over the run; nullopt when /metrics was not available.
  std::optional<std::map<std::string, double>> server_deltas;
};

void print_report(std::FILE* out, const Summary& summary, const ServeOptions& options,
                  const RunInfo& info);

nlohmann::json result_json(const Summary& summary, const std::vector<RequestRecord>& records,
                           const Dataset& dataset, const ServeOptions& options, const RunInfo& info);

// vLLM's pattern: BACKEND-RATEqps-concurrencyC-MODEL-DATE.json, '/' in the model name made '_'.
std::string default_result_filename(const ServeOptions& options, const RunInfo& info);

}  // namespace fp4::bench_serve
