#include "server/openai_request.h"

#include <fmt/format.h>

#include <limits>

#include "sampling/sampling_params.h"
#include "server/api_error.h"

namespace fp4::server {
namespace {

using nlohmann::json;

const char* type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    case json::value_t::number_float: return "a number";
    default: return "an integer";
  }
}

// Typed access to the body's fields; null counts as absent, as in OpenAI's API.
class Fields {
 public:
  explicit Fields(const json& body) : body_(body) {}

  const json* get(const char* name) const {
    const auto it = body_.find(name);
    return it == body_.end() || it->is_null() ? nullptr : &*it;
  }
  std::optional<bool> boolean(const char* name) const {
    const json* v = get(name);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) throw bad_request(fmt::format("'{}' must be a boolean, got {}", name, type_name(*v)), name);
    return v->get<bool>();
  }
  std::optional<double> number(const char* name, double lo, double hi) const {
    const json* v = get(name);
    if (!v) return std::nullopt;
    if (!v->is_number()) throw bad_request(fmt::format("'{}' must be a number, got {}", name, type_name(*v)), name);
    const double x = v->get<double>();
    if (!(x >= lo && x <= hi)) {
      throw bad_request(fmt::format("'{}' must be in [{}, {}], got {}", name, lo, hi, x), name);
    }
    return x;
  }
  std::optional<int64_t> integer(const char* name, int64_t lo, int64_t hi) const {
    const json* v = get(name);
    if (!v) return std::nullopt;
    if (!v->is_number_integer()) {
      throw bad_request(fmt::format("'{}' must be an integer, got {}", name, type_name(*v)), name);
    }
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(hi)) {
      throw bad_request(fmt::format("'{}' must be at most {}, got {}", name, hi, v->dump()), name);
    }
    const int64_t x = v->get<int64_t>();
    if (x < lo || x > hi) {
      throw bad_request(fmt::format("'{}' must be in [{}, {}], got {}", name, lo, hi, x), name);
    }
    return x;
  }
  std::optional<std::string> string(const char* name) const {
    const json* v = get(name);
    if (!v) return std::nullopt;
    if (!v->is_string()) throw bad_request(fmt::format("'{}' must be a string, got {}", name, type_name(*v)), name);
    return v->get<std::string>();
  }

 private:
  const json& body_;
};

constexpr int64_t kMaxInt = std::numeric_limits<int32_t>::max();

std::vector<int32_t> token_ids(const json& v, const char* param) {
  std::vector<int32_t> ids;
  for (const json& t : v) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > kMaxInt) {
      throw bad_request(fmt::format("'{}' token ids must be non-negative integers, got {}", param, t.dump()), param);
    }
    ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  return ids;
}

std::vector<Prompt> parse_prompts(const json* v) {
  if (!v) throw bad_request("'prompt' is required", "prompt");
  std::vector<Prompt> prompts;
  if (v->is_string()) {
    prompts.emplace_back(v->get<std::string>());
  } else if (v->is_array() && !v->empty() && (*v)[0].is_number_integer()) {
    prompts.emplace_back(token_ids(*v, "prompt"));
  } else if (v->is_array() && !v->empty()) {
    for (const json& p : *v) {
      if (p.is_string()) {
        prompts.emplace_back(p.get<std::string>());
      } else if (p.is_array() && !p.empty()) {
        prompts.emplace_back(token_ids(p, "prompt"));
      } else {
        throw bad_request("'prompt' must be a string, an array of strings, an array of token ids "
                          "or an array of token-id arrays, none of them empty", "prompt");
      }
    }
  } else {
    throw bad_request(fmt::format("'prompt' must be a non-empty string or array, got {}",
                                  v->is_array() ? "an empty array" : type_name(*v)), "prompt");
  }
  for (const Prompt& p : prompts) {
    if (const auto* s = std::get_if<std::string>(&p); s && s->empty()) {
      throw bad_request("'prompt' must not be empty", "prompt");
    }
  }
  return prompts;
}

void parse_messages(const json* v) {
  if (!v) throw bad_request("'messages' is required", "messages");
  if (!v->is_array() || v->empty()) throw bad_request("'messages' must be a non-empty array", "messages");
  for (size_t i = 0; i < v->size(); ++i) {
    const json& m = (*v)[i];
    const std::string where = fmt::format("messages[{}]", i);
    if (!m.is_object()) throw bad_request(where + " must be an object", "messages");
    const auto role = m.find("role");
    if (role == m.end() || !role->is_string()) {
      throw bad_request(where + ".role must be a string", "messages");
    }
    const auto content = m.find("content");
    if (content == m.end() || content->is_null()) continue;  // e.g. an assistant tool call
    if (content->is_string()) continue;
    if (!content->is_array()) throw bad_request(where + ".content must be a string or an array of parts", "messages");
    for (const json& part : *content) {
      if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
          !part["text"].is_string()) {
        throw bad_request(where + ".content parts must be {\"type\": \"text\", \"text\": string} "
                          "(this server serves text only)", "messages");
      }
    }
  }
}

std::vector<std::string> parse_stop(const json* v) {
  if (!v) return {};
  std::vector<std::string> stop;
  if (v->is_string()) {
    stop.push_back(v->get<std::string>());
  } else if (v->is_array()) {
    for (const json& s : *v) {
      if (!s.is_string()) throw bad_request("'stop' must be a string or an array of strings", "stop");
      stop.push_back(s.get<std::string>());
    }
  } else {
    throw bad_request("'stop' must be a string or an array of strings", "stop");
  }
  for (const std::string& s : stop) {
    if (s.empty()) throw bad_request("'stop' strings must not be empty", "stop");
  }
  return stop;
}

void parse_sampling(const Fields& f, engine::EngineRequest& e) {
  sampling::SamplingParams& s = e.sampling;
  if (auto t = f.number("temperature", -1e300, 1e300)) {
    if (*t < 0) throw bad_request(fmt::format("'temperature' must be non-negative, got {}", *t), "temperature");
    s.temperature = static_cast<float>(*t);
  }
  if (auto p = f.number("top_p", 0, 1)) {
    if (*p <= 0) throw bad_request(fmt::format("'top_p' must be in (0, 1], got {}", *p), "top_p");
    s.top_p = static_cast<float>(*p);
  }
  if (auto k = f.integer("top_k", -1, kMaxInt)) s.top_k = static_cast<int>(*k);
  if (auto m = f.number("min_p", 0, 1)) s.min_p = static_cast<float>(*m);
  if (auto r = f.number("repetition_penalty", 0, 1e6)) {
    if (*r <= 0) throw bad_request("'repetition_penalty' must be positive", "repetition_penalty");
    s.repetition_penalty = static_cast<float>(*r);
  }
  if (auto p = f.number("frequency_penalty", -2, 2)) s.frequency_penalty = static_cast<float>(*p);
  if (auto p = f.number("presence_penalty", -2, 2)) s.presence_penalty = static_cast<float>(*p);
  if (const json* seed = f.get("seed")) {
    if (!seed->is_number_integer()) throw bad_request("'seed' must be an integer", "seed");
    s.seed = seed->is_number_unsigned() ? seed->get<uint64_t>()
                                        : static_cast<uint64_t>(seed->get<int64_t>());
  }
  if (auto m = f.integer("min_tokens", 0, kMaxInt)) e.min_tokens = *m;
  if (auto b = f.boolean("ignore_eos")) e.ignore_eos = *b;
  if (auto b = f.boolean("include_stop_str_in_output")) e.include_stop_str_in_output = *b;
  if (auto b = f.boolean("skip_special_tokens")) e.skip_special_tokens = *b;
  e.stop = parse_stop(f.get("stop"));
  if (const json* ids = f.get("stop_token_ids")) {
    if (!ids->is_array()) throw bad_request("'stop_token_ids' must be an array of token ids", "stop_token_ids");
    e.stop_token_ids = token_ids(*ids, "stop_token_ids");
  }
}

void refuse_unsupported(const Fields& f) {
  if (const json* b = f.get("logit_bias"); b && !(b->is_object() && b->empty())) {
    throw bad_request("'logit_bias' is not supported", "logit_bias");
  }
  if (f.get("suffix")) throw bad_request("'suffix' is not supported", "suffix");
  if (const json* r = f.get("response_format")) {
    if (!r->is_object() || r->value("type", "") != "text") {
      throw bad_request("'response_format' other than {\"type\": \"text\"} is not supported",
                        "response_format");
    }
  }
  if (const json* t = f.get("tools"); t && !(t->is_array() && t->empty())) {
    throw bad_request("'tools' is not supported by this server", "tools");
  }
}

}  // namespace

GenerationRequest parse_generation_request(Endpoint endpoint, const json& body) {
  if (!body.is_object()) {
    throw bad_request(fmt::format("the request body must be a JSON object, got {}", type_name(body)));
  }
  const Fields f(body);
  GenerationRequest r;
  r.endpoint = endpoint;
  r.model = f.string("model").value_or("");
  refuse_unsupported(f);
  if (endpoint == Endpoint::kCompletions) {
    r.prompts = parse_prompts(f.get("prompt"));
    r.echo = f.boolean("echo").value_or(false);
    if (auto lp = f.integer("logprobs", 0, sampling::kMaxLogprobs)) r.logprobs = static_cast<int>(*lp);
    r.max_tokens = f.integer("max_tokens", 1, kMaxInt).value_or(16);
    if (r.echo && r.logprobs >= 0) {
      throw bad_request("'echo' with 'logprobs' needs prompt logprobs, which are not supported", "echo");
    }
  } else {
    const json* messages = f.get("messages");
    parse_messages(messages);
    r.messages = *messages;
    r.add_generation_prompt = f.boolean("add_generation_prompt").value_or(true);
    r.continue_final_message = f.boolean("continue_final_message").value_or(false);
    if (r.add_generation_prompt && r.continue_final_message) {
      throw bad_request("'add_generation_prompt' and 'continue_final_message' cannot both be true",
                        "continue_final_message");
    }
    if (const json* k = f.get("chat_template_kwargs")) {
      if (!k->is_object()) throw bad_request("'chat_template_kwargs' must be an object", "chat_template_kwargs");
      r.chat_template_kwargs = *k;
    }
    const bool logprobs = f.boolean("logprobs").value_or(false);
    const auto top = f.integer("top_logprobs", 0, sampling::kMaxLogprobs);
    if (top && !logprobs) throw bad_request("'top_logprobs' needs 'logprobs': true", "top_logprobs");
    if (logprobs) r.logprobs = static_cast<int>(top.value_or(0));
    // max_completion_tokens is the current name; max_tokens the deprecated one.
    r.max_tokens = f.integer("max_completion_tokens", 1, kMaxInt);
    if (!r.max_tokens) r.max_tokens = f.integer("max_tokens", 1, kMaxInt);
  }
  r.add_special_tokens = f.boolean("add_special_tokens");
  r.n = f.integer("n", 1, 128).value_or(1);
  if (auto best_of = f.integer("best_of", 1, 128); best_of && *best_of != r.n) {
    throw bad_request("'best_of' different from 'n' is not supported", "best_of");
  }
  r.stream = f.boolean("stream").value_or(false);
  if (const json* so = f.get("stream_options")) {
    if (!so->is_object()) throw bad_request("'stream_options' must be an object", "stream_options");
    if (!r.stream) throw bad_request("'stream_options' is only allowed with 'stream': true", "stream_options");
    const auto usage = so->find("include_usage");
    if (usage != so->end() && !usage->is_null()) {
      if (!usage->is_boolean()) throw bad_request("'stream_options.include_usage' must be a boolean", "stream_options");
      r.include_usage = usage->get<bool>();
    }
  }
  parse_sampling(f, r.engine);
  r.engine.sampling.logprobs = r.logprobs;
  if (r.max_tokens && r.engine.min_tokens > *r.max_tokens) {
    throw bad_request(fmt::format("'min_tokens' ({}) must not exceed 'max_tokens' ({})",
                                  r.engine.min_tokens, *r.max_tokens), "min_tokens");
  }
  return r;
}

TokenizeRequest parse_tokenize_request(const json& body) {
  if (!body.is_object()) throw bad_request("the request body must be a JSON object");
  const Fields f(body);
  TokenizeRequest r;
  r.model = f.string("model").value_or("");
  r.add_special_tokens = f.boolean("add_special_tokens");
  r.add_generation_prompt = f.boolean("add_generation_prompt").value_or(true);
  if (const json* m = f.get("messages")) {
    parse_messages(m);
    r.messages = *m;
  } else {
    r.prompt = f.string("prompt");
    if (!r.prompt) throw bad_request("'prompt' (a string) or 'messages' is required", "prompt");
  }
  return r;
}

std::vector<int32_t> parse_detokenize_request(const json& body, std::string& model) {
  if (!body.is_object()) throw bad_request("the request body must be a JSON object");
  const Fields f(body);
  model = f.string("model").value_or("");
  const json* tokens = f.get("tokens");
  if (!tokens || !tokens->is_array()) throw bad_request("'tokens' must be an array of token ids", "tokens");
  return token_ids(*tokens, "tokens");
}

}  // namespace fp4::server
