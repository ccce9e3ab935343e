// A model's chat template: turns an OpenAI `messages` list into the prompt text the way
// transformers' tokenizer.apply_chat_template(messages, tokenize=False,
// add_generation_prompt=...) does, byte for byte. docs/chat_templates.md lists the Jinja
// subset that is understood and the templates it is tested on.
//
// A ChatTemplate is immutable once parsed: copies share it and any thread may render.
//
// Errors are fp4::Error. A template that fails to parse names the line and column. While
// rendering, raise_exception('...') in the template throws jinja::TemplateRaised whose what() is
// the template's message verbatim (meant for the client, as an HTTP 400); any other failure
// (an undefined value used as an object, a type error) throws an fp4::Error that says where.
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "chat/jinja_error.h"

namespace fp4::chat {

// How a message whose content is a list of parts ([{"type": "text", "text": ...}]) reaches the
// template. Content that is a string (or null) is always passed as it is.
enum class ContentFormat {
  kAuto,    // kOpenAI when the template loops over a message's content, else kString (vLLM's rule)
  kString,  // the text parts joined with "\n" into one string, as vLLM does
  kOpenAI,  // the list of parts, unchanged, for templates that walk it themselves
};

struct ChatTemplateContext {
  bool add_generation_prompt = true;
  // Passed as bos_token / eos_token when set (transformers passes the tokenizer's special tokens).
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
  // The request's tools (a list of JSON schemas); null gives the template `tools = none`.
  nlohmann::ordered_json tools;
  // Further variables, e.g. {"enable_thinking": false} (vLLM's chat_template_kwargs); they
  // override the ones above of the same name, as transformers' keyword arguments do.
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
  ContentFormat content_format = ContentFormat::kAuto;
  // The time strftime_now() formats (local time zone); unset: the time of the call.
  std::optional<std::chrono::system_clock::time_point> now;
};

class ChatTemplate {
 public:
  static ChatTemplate parse(std::string source);

  // `messages` is the OpenAI messages array. Key order is kept as given, which matters to
  // templates that print whole objects with tojson; nlohmann::json sorts keys, so prefer
  // parsing requests into ordered_json.
  std::string render(const nlohmann::ordered_json& messages, const ChatTemplateContext& ctx) const;
  std::string render(const nlohmann::json& messages, const ChatTemplateContext& ctx) const;

  // kString or kOpenAI: what kAuto resolves to for this template.
  ContentFormat detected_content_format() const;
  const std::string& source() const;

 private:
  struct Parsed;
  explicit ChatTemplate(std::shared_ptr<const Parsed> parsed) : parsed_(std::move(parsed)) {}
  std::shared_ptr<const Parsed> parsed_;
};

// Checks that `messages` is an array of objects and turns list content into what `format`
// (kString or kOpenAI) asks. Errors name the message: "messages[2].content[1]: ...".
nlohmann::ordered_json prepare_messages(const nlohmann::ordered_json& messages, ContentFormat format);

// Where a model keeps its template and the special tokens the template is given.
struct ChatTemplateSource {
  std::string source;
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
};

// From tokenizer_config.json's content: "chat_template" is a string, or a list of
// {"name", "template"} of which `name` is chosen. bos_token/eos_token may be strings or
// {"content": ...} objects.
ChatTemplateSource chat_template_from_tokenizer_config(const nlohmann::json& config,
                                                       std::string_view name = "default");
// From a model directory: chat_template.jinja when present, else chat_template.json's
// "chat_template", else tokenizer_config.json's; special tokens from tokenizer_config.json.
ChatTemplateSource load_chat_template(const std::filesystem::path& model_dir,
                                      std::string_view name = "default");

}  // namespace fp4::chat
