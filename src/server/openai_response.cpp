#include "server/openai_response.h"

#include <cmath>

namespace fp4::server {
namespace {

using nlohmann::json;

// JSON has no -inf; a token masked out of the distribution reports vLLM's floor.
double finite_logprob(float lp) { return std::isfinite(lp) ? double(lp) : -9999.0; }

json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(int(c));
  return b;
}

// JSON strings must be valid UTF-8; a token that is part of a character shows as U+FFFD, as
// Hugging Face decodes a lone byte.
std::string valid_utf8(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = s[i];
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    bool ok = len > 0 && i + len <= s.size();
    for (size_t k = 1; ok && k < len; ++k) ok = (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
    if (ok) {
      out.append(s, i, len);
      i += len;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

}  // namespace

void Choice::add(const engine::RequestOutput& out) {
  text += out.text;
  tokens.insert(tokens.end(), out.tokens.begin(), out.tokens.end());
  if (out.finished()) {
    finish_reason = out.finish_reason;
    stop_token = out.stop_token;
    stop_string = out.stop_string;
    error = out.error;
  }
  prompt_tokens = out.prompt_tokens;
  cached_prompt_tokens = out.cached_prompt_tokens;
  output_tokens = std::max(output_tokens, out.output_tokens);
}

json usage_json(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

json finish_reason_json(engine::FinishReason reason) {
  const char* name = engine::finish_reason_name(reason);
  return name ? json(name) : json(nullptr);
}

json stop_reason_json(const std::optional<int32_t>& token, const std::optional<std::string>& text) {
  if (token) return *token;
  if (text) return *text;
  return nullptr;
}

ResponseBuilder::ResponseBuilder(Endpoint endpoint, std::string id, int64_t created,
                                 std::string model, const tokenizer::Tokenizer& tokenizer,
                                 int logprobs)
    : endpoint_(endpoint), id_(std::move(id)), created_(created), model_(std::move(model)),
      tokenizer_(tokenizer), logprobs_(logprobs) {}

std::string ResponseBuilder::token_text(int32_t id) const {
  const int32_t ids[] = {id};
  return tokenizer_.decode(ids, false);
}

json ResponseBuilder::envelope(const char* object) const {
  return {{"id", id_}, {"object", object}, {"created", created_}, {"model", model_}};
}

json ResponseBuilder::logprobs(const std::vector<engine::TokenOutput>& tokens,
                               size_t text_offset) const {
  if (logprobs_ < 0) return nullptr;
  if (endpoint_ == Endpoint::kChat) {
    json content = json::array();
    for (const engine::TokenOutput& t : tokens) {
      const std::string text = token_text(t.token);
      json top = json::array();
      for (const auto& [id, lp] : t.top_logprobs) {
        const std::string alt = token_text(id);
        top.push_back({{"token", valid_utf8(alt)}, {"logprob", finite_logprob(lp)}, {"bytes", bytes_of(alt)}});
      }
      content.push_back({{"token", valid_utf8(text)}, {"logprob", finite_logprob(t.logprob)},
                         {"bytes", bytes_of(text)}, {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  json texts = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  for (const engine::TokenOutput& t : tokens) {
    const std::string text = valid_utf8(token_text(t.token));
    texts.push_back(text);
    lps.push_back(finite_logprob(t.logprob));
    offsets.push_back(text_offset);
    text_offset += text.size();
    // vLLM's shape: the top alternatives and the sampled token, keyed by their text.
    json top = json::object();
    for (const auto& [id, lp] : t.top_logprobs) top[valid_utf8(token_text(id))] = finite_logprob(lp);
    top[text] = finite_logprob(t.logprob);
    tops.push_back(top);
  }
  return {{"tokens", texts}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

json ResponseBuilder::chunk(int64_t index, const engine::RequestOutput& out, bool first,
                            const std::string& prefix, size_t text_offset) const {
  const std::string text = valid_utf8(prefix + out.text);
  json choice = {{"index", index}, {"logprobs", logprobs(out.tokens, text_offset)},
                 {"finish_reason", finish_reason_json(out.finish_reason)},
                 {"stop_reason", stop_reason_json(out.stop_token, out.stop_string)}};
  json c;
  if (endpoint_ == Endpoint::kChat) {
    c = envelope("chat.completion.chunk");
    json delta = {{"content", text}};
    if (first) delta["role"] = "assistant";
    choice["delta"] = delta;
  } else {
    c = envelope("text_completion");
    choice["text"] = text;
  }
  c["choices"] = json::array({choice});
  return c;
}

json ResponseBuilder::usage_chunk(const Usage& usage) const {
  json c = envelope(endpoint_ == Endpoint::kChat ? "chat.completion.chunk" : "text_completion");
  c["choices"] = json::array();
  c["usage"] = usage_json(usage);
  return c;
}

json ResponseBuilder::response(const std::vector<Choice>& choices, const Usage& usage,
                               const std::vector<std::string>& prefixes) const {
  json r = envelope(endpoint_ == Endpoint::kChat ? "chat.completion" : "text_completion");
  json list = json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const Choice& ch = choices[i];
    const std::string prefix = i < prefixes.size() ? prefixes[i] : std::string();
    json c = {{"index", ch.index}, {"logprobs", logprobs(ch.tokens, prefix.size())},
              {"finish_reason", finish_reason_json(ch.finish_reason)},
              {"stop_reason", stop_reason_json(ch.stop_token, ch.stop_string)}};
    if (endpoint_ == Endpoint::kChat) {
      c["message"] = {{"role", "assistant"}, {"content", valid_utf8(ch.text)}};
    } else {
      c["text"] = valid_utf8(prefix + ch.text);
    }
    list.push_back(c);
  }
  r["choices"] = list;
  r["usage"] = usage_json(usage);
  return r;
}

}  // namespace fp4::server
