// What one streamed request measured, and the rules that turn its SSE events into those
// measurements; the rules are those of `vllm bench serve` (docs/bench_serve.md).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fp4::bench_serve {

using Clock = std::chrono::steady_clock;

// One request's outcome. Times are seconds; start and scheduled times count from the start of
// the benchmark, the others from the request's own start.
struct RequestRecord {
  bool success = false;
  std::string error;           // why it failed (a non-200 status keeps the response body)
  int http_status = 0;         // 0 when no response header arrived
  double scheduled_s = 0;      // when the arrival process released it
  double start_s = 0;          // just before it was sent (after any wait for a concurrency slot)
  double ttft_s = 0;           // first event with a non-empty `choices`
  std::vector<double> itl_s;   // gaps between consecutive choice-carrying events
  double e2el_s = 0;           // to the last choice-carrying event
  int64_t prompt_len = 0;      // the server's usage.prompt_tokens when it sent one, else ours
  int64_t output_tokens = 0;   // usage.completion_tokens, else the number of token events
  bool output_from_usage = false;
  int64_t token_events = 0;
  std::string generated_text;
};

// Consumes the data of each SSE event of one response, with the time the event was parsed.
class StreamMeasurer {
 public:
  explicit StreamMeasurer(Clock::time_point start) : start_(start) {}

  void on_event(std::string_view data, Clock::time_point parsed_at);
  // True after `data: [DONE]` or an error event: nothing that follows can change the record.
  bool finished() const { return done_ || !error_.empty(); }
  // Fills the measured fields of `record` (prompt_len stays as given unless the server counted
  // it). A request without any token event fails, as in vLLM.
  void finish(RequestRecord& record) const;

 private:
  Clock::time_point start_;
  std::optional<Clock::time_point> first_token_;
  Clock::time_point last_token_{};
  std::vector<double> itl_s_;
  int64_t token_events_ = 0;
  std::optional<int64_t> usage_completion_tokens_;
  std::optional<int64_t> usage_prompt_tokens_;
  std::string text_;
  std::string error_;
  bool done_ = false;
};

}  // namespace fp4::bench_serve
