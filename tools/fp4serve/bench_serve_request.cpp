#include "tools/fp4serve/bench_serve_request.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "tools/fp4serve/bench_serve_sse.h"

namespace fp4::bench_serve {

std::string request_body(const ServeOptions& options, const std::string& model, const Prompt& prompt) {
  nlohmann::json body = {{"model", model},
                         {"stream", true},
                         {"stream_options", {{"include_usage", true}}},
                         {"temperature", 0.0},
                         {"max_tokens", prompt.output_len}};
  if (options.backend == "openai-chat") {
    body["messages"] = nlohmann::json::array({{{"role", "user"}, {"content", prompt.text}}});
    body["max_completion_tokens"] = prompt.output_len;
  } else {
    body["prompt"] = prompt.ids;
  }
  if (options.ignore_eos) body["ignore_eos"] = true;
  // Invalid UTF-8 in a decoded prompt (a byte-fallback token cut in half) is replaced rather
  // than refused: the server sees a valid string and reports its true length in usage.
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

RequestRecord send_request(const HttpClient& client, const ServeOptions& options,
                           const std::string& model, const Prompt& prompt,
                           Clock::time_point bench_start, double scheduled_s) {
  RequestRecord record;
  record.scheduled_s = scheduled_s;
  record.prompt_len = prompt.input_len;
  const std::string body = request_body(options, model, prompt);

  Clock::time_point start = Clock::now();
  StreamMeasurer measurer(start);
  SseParser parser;
  std::vector<SseEvent> events;
  const auto deadline = start + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(options.timeout_s));
  try {
    const HttpResponse response = client.stream(
        options.endpoint, body, deadline,
        [&] {
          start = Clock::now();
          measurer = StreamMeasurer(start);
        },
        [&](std::string_view bytes) {
          events.clear();
          parser.feed(bytes, events);
          for (const SseEvent& e : events) measurer.on_event(e.data, Clock::now());
          return !measurer.finished();
        });
    record.start_s = std::chrono::duration<double>(start - bench_start).count();
    record.http_status = response.status;
    if (!response.error.empty() && response.status == 0) {
      record.error = response.error;
      return record;
    }
    if (response.status != 200) {
      record.error = fmt::format("HTTP {} {}: {}", response.status, response.reason, response.body);
      return record;
    }
    measurer.finish(record);
    // A stream cut off (a timeout, a reset) before [DONE] or an error event failed, even with
    // tokens in hand; a server that simply ends the body without [DONE] has not.
    if (!response.error.empty() && !measurer.finished()) {
      record.success = false;
      record.error = response.error;
    }
  } catch (const std::exception& e) {
    record.start_s = std::chrono::duration<double>(start - bench_start).count();
    record.success = false;
    record.error = fmt::format("client error: {}", e.what());
  }
  return record;
}

}  // namespace fp4::bench_serve
