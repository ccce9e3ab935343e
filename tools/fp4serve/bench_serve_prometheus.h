// Reading counters out of a Prometheus text exposition (what GET /metrics returns), to report
// what the server's own counters saw during a benchmark run.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace fp4::bench_serve {

// The server counters a run reports the change of (vLLM's names, with the `_total` suffix
// counters carry on the wire).
inline const std::vector<std::string> kServerCounters = {
    "vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total", "vllm:num_preemptions_total"};

// For each name in `names` that the exposition has, the sum of its samples over every label set
// (vLLM labels each sample with model_name and engine, so a server with several engines has
// several samples of one counter). Names absent from the text are absent from the result.
// Malformed lines are skipped: a scrape must never fail a benchmark.
std::map<std::string, double> read_counters(std::string_view exposition,
                                            const std::vector<std::string>& names);

// after - before, for the names present in both.
std::map<std::string, double> counter_deltas(const std::map<std::string, double>& before,
                                             const std::map<std::string, double>& after);

}  // namespace fp4::bench_serve
