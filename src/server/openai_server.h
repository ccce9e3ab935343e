// The OpenAI-compatible API over an AsyncEngine:
//   POST /v1/completions, /v1/chat/completions   (JSON, or SSE with "stream": true)
//   GET  /v1/models, /health, /metrics, /version
//   POST /tokenize, /detokenize                  (vLLM's shapes)
// Every error is an OpenAI error object with the right status. A client that disconnects has its
// requests aborted, which frees their pages at once.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/async_engine.h"
#include "server/http_server.h"
#include "server/openai_request.h"
#include "tokenizer/tokenizer.h"

namespace fp4::server {

// Renders a chat's messages into the prompt text (the chat template). Throws ApiError 400 for a
// conversation the template refuses.
struct ChatRenderInput {
  const nlohmann::json& messages;
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  const nlohmann::json& kwargs;
};
using ChatRenderer = std::function<std::string(const ChatRenderInput&)>;

struct ServerConfig {
  std::string served_model_name;
  std::string model_root;  // the model directory, reported as "root" in /v1/models
  std::string api_key;     // empty: no authentication
  ChatRenderer chat;       // empty: /v1/chat/completions answers 400
  int64_t created = 0;     // unix time the server started
};

class OpenAiServer {
 public:
  OpenAiServer(engine::AsyncEngine& engine, const tokenizer::Tokenizer& tokenizer,
               ServerConfig config);

  void handle(const HttpRequest& request, HttpResponder& responder);

  int64_t max_model_len() const;

 private:
  void generate(Endpoint endpoint, const HttpRequest& request, HttpResponder& responder);
  void tokenize(const HttpRequest& request, HttpResponder& responder);
  void detokenize(const HttpRequest& request, HttpResponder& responder);
  void models(HttpResponder& responder);
  void check_model(const std::string& requested) const;
  std::vector<int32_t> render_chat(const GenerationRequest& r) const;

  engine::AsyncEngine& engine_;
  const tokenizer::Tokenizer& tokenizer_;
  ServerConfig config_;
  std::atomic<uint64_t> next_id_{0};
};

}  // namespace fp4::server
