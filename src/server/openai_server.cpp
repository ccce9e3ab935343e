#include "server/openai_server.h"

#include <fmt/format.h>

#include <unordered_map>

#include "core/check.h"
#include "server/api_error.h"
#include "server/metrics_text.h"
#include "server/openai_response.h"

namespace fp4::server {
namespace {

using nlohmann::json;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

void send_json(HttpResponder& r, int status, const json& body) {
  r.send(status, "application/json", dump(body));
}

json parse_body(const HttpRequest& request) {
  try {
    return json::parse(request.body);
  } catch (const json::parse_error& e) {
    throw bad_request(fmt::format("Invalid JSON in the request body: {}", e.what()));
  }
}

ApiError context_error(int64_t prompt, int64_t max_len, const char* param) {
  return ApiError(400, fmt::format("This model's maximum context length is {} tokens. However, your "
                                   "request has {} input tokens. Please reduce the length of the "
                                   "input.", max_len, prompt),
                  "invalid_request_error", param, "context_length_exceeded");
}

// One HTTP generation request: its engine requests, their choice slots and one stream.
struct Batch {
  engine::AsyncEngine& engine;
  std::shared_ptr<engine::RequestStream> stream = std::make_shared<engine::RequestStream>();
  std::unordered_map<engine::RequestId, size_t> choice_of;
  size_t unfinished = 0;

  explicit Batch(engine::AsyncEngine& e) : engine(e) {}
  ~Batch() { abort_all(); }  // whatever path leaves the handler, nothing keeps running

  void abort_all() {
    if (unfinished == 0) return;
    for (const auto& [id, choice] : choice_of) engine.abort(id);
    unfinished = 0;
  }
};

constexpr auto kPoll = std::chrono::milliseconds(50);

}  // namespace

OpenAiServer::OpenAiServer(engine::AsyncEngine& engine, const tokenizer::Tokenizer& tokenizer,
                           ServerConfig config)
    : engine_(engine), tokenizer_(tokenizer), config_(std::move(config)) {}

int64_t OpenAiServer::max_model_len() const { return engine_.engine().config().max_model_len; }

void OpenAiServer::handle(const HttpRequest& request, HttpResponder& responder) {
  try {
    const std::string& path = request.path;
    const bool get = request.method == "GET", post = request.method == "POST";
    if (!config_.api_key.empty() && path.starts_with("/v1/") &&
        request.header("authorization") != "Bearer " + config_.api_key) {
      throw ApiError(401, "Incorrect or missing API key: send 'Authorization: Bearer <key>'.",
                     "invalid_request_error", "", "invalid_api_key");
    }
    if (path == "/v1/completions" && post) return generate(Endpoint::kCompletions, request, responder);
    if (path == "/v1/chat/completions" && post) return generate(Endpoint::kChat, request, responder);
    if (path == "/v1/models" && get) return models(responder);
    if (path == "/tokenize" && post) return tokenize(request, responder);
    if (path == "/detokenize" && post) return detokenize(request, responder);
    if (path == "/health" && get) return responder.send(200, "text/plain", "");
    if (path == "/version" && get) return send_json(responder, 200, {{"version", "0.1.0"}});
    if (path == "/metrics" && get) {
      return responder.send(200, "text/plain; version=0.0.4; charset=utf-8",
                            render_metrics(engine_.metrics(), config_.served_model_name));
    }
    static const char* const kKnown[] = {"/v1/completions", "/v1/chat/completions", "/v1/models",
                                         "/tokenize", "/detokenize", "/health", "/version", "/metrics"};
    for (const char* known : kKnown) {
      if (path == known) {
        throw ApiError(405, fmt::format("Method {} is not allowed for {}", request.method, path),
                       "invalid_request_error");
      }
    }
    throw ApiError(404, fmt::format("Not found: {}", path), "not_found_error");
  } catch (const ApiError& e) {
    send_json(responder, e.status(), e.to_json());
  } catch (const Error& e) {
    // fp4::Error is how the engine and the tokenizer refuse input.
    send_json(responder, 400, bad_request(e.what()).to_json());
  }
}

void OpenAiServer::check_model(const std::string& requested) const {
  if (requested.empty() || requested == config_.served_model_name || requested == config_.model_root) return;
  throw ApiError(404, fmt::format("The model `{}` does not exist.", requested),
                 "invalid_request_error", "model", "model_not_found");
}

void OpenAiServer::models(HttpResponder& responder) {
  const json card = {{"id", config_.served_model_name}, {"object", "model"},
                     {"created", config_.created}, {"owned_by", "fp4serve"},
                     {"root", config_.model_root}, {"parent", nullptr},
                     {"max_model_len", max_model_len()}, {"permission", json::array()}};
  send_json(responder, 200, {{"object", "list"}, {"data", json::array({card})}});
}

std::vector<int32_t> OpenAiServer::render_chat(const GenerationRequest& r) const {
  if (!config_.chat) {
    throw bad_request("this model has no chat template; give one with --chat-template", "messages");
  }
  const std::string text = config_.chat({r.messages, r.add_generation_prompt,
                                         r.continue_final_message, r.chat_template_kwargs});
  return tokenizer_.encode(text, r.add_special_tokens.value_or(false));
}

void OpenAiServer::generate(Endpoint endpoint, const HttpRequest& request, HttpResponder& responder) {
  const GenerationRequest r = parse_generation_request(endpoint, parse_body(request));
  check_model(r.model);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::string> echo;
  const int64_t vocab = tokenizer_.vocab_size();
  if (endpoint == Endpoint::kChat) {
    prompts.push_back(render_chat(r));
  } else {
    for (const Prompt& p : r.prompts) {
      if (const auto* text = std::get_if<std::string>(&p)) {
        prompts.push_back(tokenizer_.encode(*text, r.add_special_tokens.value_or(true)));
        echo.push_back(r.echo ? *text : "");
      } else {
        const auto& ids = std::get<std::vector<int32_t>>(p);
        for (int32_t t : ids) {
          if (t >= vocab) {
            throw bad_request(fmt::format("prompt token {} is outside the vocabulary [0, {})", t, vocab), "prompt");
          }
        }
        prompts.push_back(ids);
        echo.push_back(r.echo ? tokenizer_.decode(ids, false) : "");
      }
    }
  }
  const int64_t max_len = max_model_len();
  const char* prompt_param = endpoint == Endpoint::kChat ? "messages" : "prompt";
  std::vector<int64_t> max_tokens;
  for (const auto& p : prompts) {
    const int64_t n = std::ssize(p);
    if (n == 0) throw bad_request("the prompt is empty after tokenization", prompt_param);
    if (n >= max_len) throw context_error(n, max_len, prompt_param);
    if (r.max_tokens && n + *r.max_tokens > max_len) {
      throw ApiError(400, fmt::format("'max_tokens' or 'max_completion_tokens' is too large: {}. This "
                                      "model's maximum context length is {} tokens and your request "
                                      "has {} input tokens ({} > {} - {}).", *r.max_tokens, max_len,
                                      n, *r.max_tokens, max_len, n),
                     "invalid_request_error", "max_tokens", "context_length_exceeded");
    }
    max_tokens.push_back(r.max_tokens.value_or(max_len - n));
    if (r.engine.min_tokens > max_tokens.back()) {
      throw bad_request(fmt::format("'min_tokens' ({}) exceeds the tokens left in the context ({})",
                                    r.engine.min_tokens, max_tokens.back()), "min_tokens");
    }
  }

  Batch batch(engine_);
  std::vector<Choice> choices;
  std::vector<std::string> prefixes;
  for (size_t i = 0; i < prompts.size(); ++i) {
    for (int64_t j = 0; j < r.n; ++j) {
      engine::EngineRequest e = r.engine;
      e.prompt = prompts[i];
      e.max_tokens = max_tokens[i];
      // n choices from one seed must differ, and stay reproducible.
      if (e.sampling.seed && j > 0) *e.sampling.seed += static_cast<uint64_t>(j);
      const engine::RequestId id = engine_.submit(std::move(e), batch.stream);
      batch.choice_of[id] = choices.size();
      ++batch.unfinished;
      Choice c;
      c.index = std::ssize(choices);
      choices.push_back(c);
      prefixes.push_back(endpoint == Endpoint::kCompletions ? echo[i] : "");
    }
  }
  Usage usage;
  for (const auto& p : prompts) usage.prompt_tokens += std::ssize(p);

  const std::string kind = endpoint == Endpoint::kChat ? "chatcmpl" : "cmpl";
  const ResponseBuilder builder(endpoint, fmt::format("{}-{:016x}", kind, next_id_++ * 0x9E3779B97F4A7C15ull + config_.created),
                                config_.created, r.model.empty() ? config_.served_model_name : r.model,
                                tokenizer_, r.logprobs);
  std::vector<bool> first(choices.size(), true);
  std::vector<size_t> offsets(choices.size(), 0);
  std::string error;
  if (r.stream && !responder.begin_stream(200, "text/event-stream")) return;
  while (batch.unfinished > 0) {
    const std::vector<engine::RequestOutput> outs = batch.stream->wait(kPoll);
    if (responder.client_gone()) return;  // ~Batch aborts what still runs
    for (const engine::RequestOutput& o : outs) {
      const size_t c = batch.choice_of.at(o.id);
      choices[c].add(o);
      if (o.finished()) --batch.unfinished;
      if (!o.error.empty()) error = o.error;
      if (!r.stream || (o.tokens.empty() && !o.finished()) || !o.error.empty()) continue;
      const std::string prefix = first[c] ? prefixes[c] : "";
      const json chunk = builder.chunk(choices[c].index, o, first[c], prefix, offsets[c]);
      offsets[c] += prefix.size() + o.text.size();
      first[c] = false;
      if (!responder.write_chunk("data: " + dump(chunk) + "\n\n")) return;
    }
  }
  // Prompt tokens count once per prompt (not per choice), and so do their cache hits: those
  // of each prompt's first choice.
  for (const Choice& c : choices) {
    usage.completion_tokens += c.output_tokens;
    if (c.index % r.n == 0) usage.cached_tokens += c.cached_prompt_tokens;
  }
  if (!r.stream) {
    if (!error.empty()) throw ApiError(500, error, "server_error");
    return send_json(responder, 200, builder.response(choices, usage, prefixes));
  }
  if (!error.empty()) {
    responder.write_chunk("data: " + dump(ApiError(500, error, "server_error").to_json()) + "\n\n");
  }
  if (r.include_usage) responder.write_chunk("data: " + dump(builder.usage_chunk(usage)) + "\n\n");
  responder.write_chunk("data: [DONE]\n\n");
  responder.end_stream();
}

void OpenAiServer::tokenize(const HttpRequest& request, HttpResponder& responder) {
  const TokenizeRequest r = parse_tokenize_request(parse_body(request));
  check_model(r.model);
  std::vector<int32_t> ids;
  if (r.prompt) {
    ids = tokenizer_.encode(*r.prompt, r.add_special_tokens.value_or(true));
  } else {
    GenerationRequest g;
    g.messages = r.messages;
    g.add_generation_prompt = r.add_generation_prompt;
    g.add_special_tokens = r.add_special_tokens;
    ids = render_chat(g);
  }
  send_json(responder, 200, {{"count", ids.size()}, {"max_model_len", max_model_len()},
                             {"tokens", ids}, {"token_strs", nullptr}});
}

void OpenAiServer::detokenize(const HttpRequest& request, HttpResponder& responder) {
  std::string model;
  const std::vector<int32_t> ids = parse_detokenize_request(parse_body(request), model);
  check_model(model);
  for (int32_t t : ids) {
    if (t >= tokenizer_.vocab_size()) {
      throw bad_request(fmt::format("token {} is outside the vocabulary [0, {})", t, tokenizer_.vocab_size()), "tokens");
    }
  }
  send_json(responder, 200, {{"prompt", tokenizer_.decode(ids, false)}});
}

}  // namespace fp4::server
