// The JSON the OpenAI API returns: whole responses, streamed chunks, usage and logprobs, for
// completions and chat completions, with the field names and shapes clients parse.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine_request.h"
#include "server/openai_request.h"
#include "tokenizer/tokenizer.h"

namespace fp4::server {

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;
};

// What one choice has produced so far.
struct Choice {
  int64_t index = 0;
  std::string text;
  std::vector<engine::TokenOutput> tokens;
  engine::FinishReason finish_reason = engine::FinishReason::kNone;
  std::optional<int32_t> stop_token;
  std::optional<std::string> stop_string;
  int64_t prompt_tokens = 0;
  int64_t cached_prompt_tokens = 0;
  int64_t output_tokens = 0;
  std::string error;

  void add(const engine::RequestOutput& out);
};

class ResponseBuilder {
 public:
  ResponseBuilder(Endpoint endpoint, std::string id, int64_t created, std::string model,
                  const tokenizer::Tokenizer& tokenizer, int logprobs);

  // One streamed event for one engine output of a choice. `first`: the choice's first event
  // (chat puts the assistant role in it); `prefix`: text to put before the output's (echo).
  nlohmann::json chunk(int64_t index, const engine::RequestOutput& out, bool first,
                       const std::string& prefix, size_t text_offset) const;
  // The final streamed event when include_usage is set: no choices, only usage.
  nlohmann::json usage_chunk(const Usage& usage) const;
  nlohmann::json response(const std::vector<Choice>& choices, const Usage& usage,
                          const std::vector<std::string>& prefixes) const;

 private:
  nlohmann::json logprobs(const std::vector<engine::TokenOutput>& tokens, size_t text_offset) const;
  nlohmann::json envelope(const char* object) const;
  std::string token_text(int32_t id) const;

  Endpoint endpoint_;
  std::string id_;
  int64_t created_;
  std::string model_;
  const tokenizer::Tokenizer& tokenizer_;
  int logprobs_;
};

nlohmann::json usage_json(const Usage& usage);
// OpenAI's finish_reason: "stop" or "length"; an aborted choice reports "abort" as vLLM does.
nlohmann::json finish_reason_json(engine::FinishReason reason);
nlohmann::json stop_reason_json(const std::optional<int32_t>& token,
                                const std::optional<std::string>& text);

}  // namespace fp4::server
