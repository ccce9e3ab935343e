#include "tools/fp4serve/bench_serve_stream.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

namespace fp4::bench_serve {
namespace {

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// The text a choice carries: `text` on /v1/completions, `delta.content` on chat.
std::string_view choice_text(const nlohmann::json& choice) {
  if (!choice.is_object()) return {};
  if (auto it = choice.find("text"); it != choice.end() && it->is_string()) {
    return it->get_ref<const std::string&>();
  }
  if (auto delta = choice.find("delta"); delta != choice.end() && delta->is_object()) {
    if (auto it = delta->find("content"); it != delta->end() && it->is_string()) {
      return it->get_ref<const std::string&>();
    }
  }
  return {};
}

std::optional<int64_t> count_field(const nlohmann::json& usage, const char* key) {
  auto it = usage.find(key);
  if (it == usage.end() || !it->is_number_integer()) return std::nullopt;
  return it->get<int64_t>();
}

}  // namespace

void StreamMeasurer::on_event(std::string_view data, Clock::time_point parsed_at) {
  if (finished()) return;
  if (data == "[DONE]") {
    done_ = true;
    return;
  }
  nlohmann::json event = nlohmann::json::parse(data, nullptr, /*allow_exceptions=*/false);
  if (event.is_discarded() || !event.is_object()) {
    error_ = fmt::format("the server sent an SSE event that is not a JSON object: {}",
                         data.substr(0, 500));
    return;
  }
  if (auto it = event.find("error"); it != event.end() && !it->is_null()) {
    const bool has_message = it->is_object() && it->contains("message") && (*it)["message"].is_string();
    error_ = fmt::format("error event in the stream: {}",
                         has_message ? (*it)["message"].get<std::string>() : it->dump());
    return;
  }
  if (auto it = event.find("choices"); it != event.end() && it->is_array() && !it->empty()) {
    // Any event with a choice counts, even one with empty text (vLLM's rule): that is why a
    // server must not send the chat role chunk before the first token exists.
    if (!first_token_) {
      first_token_ = parsed_at;
    } else {
      itl_s_.push_back(seconds(parsed_at - last_token_));
    }
    last_token_ = parsed_at;
    ++token_events_;
    text_.append(choice_text((*it)[0]));
  }
  if (auto it = event.find("usage"); it != event.end() && it->is_object()) {
    if (auto n = count_field(*it, "completion_tokens")) usage_completion_tokens_ = n;
    if (auto n = count_field(*it, "prompt_tokens")) usage_prompt_tokens_ = n;
  }
}

void StreamMeasurer::finish(RequestRecord& record) const {
  record.token_events = token_events_;
  record.itl_s = itl_s_;
  record.generated_text = text_;
  if (usage_prompt_tokens_) record.prompt_len = *usage_prompt_tokens_;
  if (!error_.empty()) {
    record.success = false;
    record.error = error_;
    return;
  }
  if (!first_token_) {
    record.success = false;
    record.error = "the stream ended without any event carrying a choice, so there is no TTFT";
    return;
  }
  record.success = true;
  record.ttft_s = seconds(*first_token_ - start_);
  record.e2el_s = seconds(last_token_ - start_);
  record.output_from_usage = usage_completion_tokens_.has_value();
  record.output_tokens = usage_completion_tokens_.value_or(token_events_);
}

}  // namespace fp4::bench_serve
