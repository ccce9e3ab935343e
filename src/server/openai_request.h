// Parsing and validating the body of POST /v1/completions and /v1/chat/completions, with
// OpenAI's field names and vLLM's extensions and limits. Every problem is an ApiError 400 that
// names the field (`param`); checks that need the tokenized prompt (context length) come later,
// in the server.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine_request.h"

namespace fp4::server {

enum class Endpoint { kCompletions, kChat };

using Prompt = std::variant<std::string, std::vector<int32_t>>;  // text or token ids

struct GenerationRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;             // empty: the served model
  std::vector<Prompt> prompts;   // completions: one or more
  nlohmann::json messages;       // chat: the messages array as sent
  bool add_generation_prompt = true;   // chat
  bool continue_final_message = false; // chat
  nlohmann::json chat_template_kwargs = nlohmann::json::object();
  std::optional<bool> add_special_tokens;  // default: true for completions, false for chat
  std::optional<int64_t> max_tokens;       // none: up to max_model_len
  int64_t n = 1;
  bool stream = false;
  bool include_usage = false;
  bool echo = false;             // completions: the prompt text before the completion
  int logprobs = -1;             // top alternatives per token; -1 none, 0 the sampled token only
  engine::EngineRequest engine;  // sampling, stops, min_tokens, ignore_eos; prompt and
                                 // max_tokens are filled in per prompt
};

// `body` is the parsed JSON; anything but an object is refused.
GenerationRequest parse_generation_request(Endpoint endpoint, const nlohmann::json& body);

// POST /tokenize: {"prompt": str | [ids]} or {"messages": [...]}, "add_special_tokens",
// "add_generation_prompt"; POST /detokenize: {"tokens": [ids]}.
struct TokenizeRequest {
  std::string model;
  std::optional<std::string> prompt;
  nlohmann::json messages;  // null when prompt is used
  std::optional<bool> add_special_tokens;
  bool add_generation_prompt = true;
};
TokenizeRequest parse_tokenize_request(const nlohmann::json& body);
std::vector<int32_t> parse_detokenize_request(const nlohmann::json& body, std::string& model);

}  // namespace fp4::server
