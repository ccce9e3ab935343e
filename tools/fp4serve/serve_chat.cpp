#include "tools/fp4serve/serve_chat.h"

#include <fstream>
#include <sstream>

#include "chat/chat_template.h"
#include "core/check.h"
#include "server/api_error.h"

namespace fp4::cli {
namespace {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  FP4_CHECK(in.good(), "--chat-template {}: cannot read it", path.string());
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// vLLM's continue_final_message: the conversation is rendered as if complete, then cut right
// after the last message's text, so that the model continues that message.
std::string cut_after_final_message(const std::string& rendered, const nlohmann::json& messages) {
  const nlohmann::json& last = messages.back();
  const auto content = last.find("content");
  std::string text;
  if (content != last.end() && content->is_string()) text = content->get<std::string>();
  const size_t at = text.empty() ? std::string::npos : rendered.rfind(text);
  if (at == std::string::npos) {
    throw server::bad_request("continue_final_message: the final message's text is not in the "
                              "rendered conversation", "messages");
  }
  return rendered.substr(0, at + text.size());
}

// Whether load_chat_template() has a template to find (it throws when there is none).
bool model_has_chat_template(const std::filesystem::path& dir) {
  if (std::filesystem::exists(dir / "chat_template.jinja") || std::filesystem::exists(dir / "chat_template.json")) {
    return true;
  }
  std::ifstream in(dir / "tokenizer_config.json");
  if (!in.good()) return false;
  const nlohmann::json config = nlohmann::json::parse(in, nullptr, false);
  return !config.is_discarded() && config.is_object() && config.contains("chat_template");
}

}  // namespace

server::ChatRenderer make_chat_renderer(const std::filesystem::path& model_dir,
                                        const std::string& flag, const tokenizer::Tokenizer&) {
  chat::ChatTemplateSource source;
  if (!flag.empty()) {
    std::error_code ec;
    source.source = std::filesystem::is_regular_file(flag, ec) ? read_file(flag) : flag;
    // The special tokens still come from the model.
    if (model_has_chat_template(model_dir)) {
      const chat::ChatTemplateSource model = chat::load_chat_template(model_dir);
      source.bos_token = model.bos_token;
      source.eos_token = model.eos_token;
    }
  } else if (model_has_chat_template(model_dir)) {
    source = chat::load_chat_template(model_dir);
  }
  if (source.source.empty()) return {};
  const chat::ChatTemplate tmpl = chat::ChatTemplate::parse(source.source);
  return [tmpl, source](const server::ChatRenderInput& in) {
    chat::ChatTemplateContext ctx;
    ctx.add_generation_prompt = in.add_generation_prompt;
    ctx.bos_token = source.bos_token;
    ctx.eos_token = source.eos_token;
    ctx.extra = nlohmann::ordered_json(in.kwargs);
    try {
      const std::string text = tmpl.render(in.messages, ctx);
      return in.continue_final_message ? cut_after_final_message(text, in.messages) : text;
    } catch (const chat::jinja::TemplateRaised& e) {
      throw server::bad_request(e.what(), "messages");
    } catch (const Error& e) {
      throw server::bad_request(std::string("the chat template could not render these messages: ") + e.what(), "messages");
    }
  };
}

}  // namespace fp4::cli
