#include "chat/chat_template.h"

#include <fstream>
#include <sstream>

#include "chat/jinja_ast.h"
#include "chat/jinja_globals.h"
#include "chat/jinja_json.h"
#include "chat/jinja_parser.h"
#include "chat/jinja_render.h"
#include "core/check.h"

namespace fp4::chat {

using nlohmann::ordered_json;

struct ChatTemplate::Parsed {
  std::string source;
  jinja::Template tmpl;
  ContentFormat content_format = ContentFormat::kString;
};

namespace {

bool names_content(const jinja::Expr& e) {
  if (e.kind == jinja::ExprKind::Filter || e.kind == jinja::ExprKind::Call) {
    return e.operands[0] && names_content(*e.operands[0]);
  }
  if (e.kind == jinja::ExprKind::GetAttr) return e.name == "content";
  if (e.kind == jinja::ExprKind::GetItem) {
    const jinja::Expr& key = *e.operands[1];
    return key.kind == jinja::ExprKind::Const && key.constant.is_string() && key.constant.as_string() == "content";
  }
  return false;
}

// vLLM's detection, simplified: a template that loops over `x.content` or `x['content']`
// (through filters such as selectattr) expects content as a list of parts.
bool loops_over_content(const jinja::Body& body) {
  for (const jinja::StmtPtr& s : body) {
    if (s->kind == jinja::StmtKind::For && names_content(*s->expr)) return true;
    for (const jinja::Branch& b : s->branches) {
      if (loops_over_content(b.body)) return true;
    }
    if (loops_over_content(s->body) || loops_over_content(s->else_body)) return true;
  }
  return false;
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  FP4_CHECK(in.good(), "{}: cannot open the file", path.string());
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::optional<std::string> token_text(const nlohmann::json& config, const char* key) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return (*it)["content"].get<std::string>();
  }
  fail("tokenizer_config.json: '{}' must be a string or an object with a string 'content'", key);
}

}  // namespace

ChatTemplate ChatTemplate::parse(std::string source) {
  auto parsed = std::make_shared<Parsed>();
  parsed->tmpl = jinja::parse_template(source);
  parsed->source = std::move(source);
  parsed->content_format = loops_over_content(parsed->tmpl.body) ? ContentFormat::kOpenAI : ContentFormat::kString;
  return ChatTemplate(std::move(parsed));
}

ContentFormat ChatTemplate::detected_content_format() const { return parsed_->content_format; }

const std::string& ChatTemplate::source() const { return parsed_->source; }

std::string ChatTemplate::render(const nlohmann::json& messages, const ChatTemplateContext& ctx) const {
  return render(ordered_json::parse(messages.dump()), ctx);
}

std::string ChatTemplate::render(const ordered_json& messages, const ChatTemplateContext& ctx) const {
  const ContentFormat format =
      ctx.content_format == ContentFormat::kAuto ? parsed_->content_format : ctx.content_format;
  jinja::DictData vars = jinja::transformers_globals(ctx.now.value_or(std::chrono::system_clock::now()));
  vars.set("messages", jinja::from_json(prepare_messages(messages, format)));
  vars.set("tools", jinja::from_json(ctx.tools));
  vars.set("documents", jinja::Value::none());
  vars.set("add_generation_prompt", jinja::Value(ctx.add_generation_prompt));
  if (ctx.bos_token) vars.set("bos_token", jinja::Value(*ctx.bos_token));
  if (ctx.eos_token) vars.set("eos_token", jinja::Value(*ctx.eos_token));
  FP4_CHECK(ctx.extra.is_object(), "chat template variables must be a JSON object, got {}", ctx.extra.type_name());
  for (const auto& [name, value] : ctx.extra.items()) vars.set(name, jinja::from_json(value));
  return jinja::render(parsed_->tmpl, vars);
}

ordered_json prepare_messages(const ordered_json& messages, ContentFormat format) {
  FP4_CHECK(messages.is_array(), "messages must be an array, got {}", messages.type_name());
  ordered_json out = ordered_json::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    const ordered_json& m = messages[i];
    FP4_CHECK(m.is_object(), "messages[{}] must be an object, got {}", i, m.type_name());
    ordered_json message = m;
    const auto content = m.find("content");
    if (content == m.end() || !content->is_array() || format == ContentFormat::kOpenAI) {
      out.push_back(std::move(message));
      continue;
    }
    std::string text;
    for (size_t j = 0; j < content->size(); ++j) {
      const ordered_json& part = (*content)[j];
      FP4_CHECK(part.is_object() && part.contains("type") && part["type"].is_string(),
                "messages[{}].content[{}] must be an object with a string 'type'", i, j);
      const std::string type = part["type"].get<std::string>();
      FP4_CHECK(type == "text", "messages[{}].content[{}]: content of type '{}' is not supported, only 'text'", i,
                j, type);
      FP4_CHECK(part.contains("text") && part["text"].is_string(),
                "messages[{}].content[{}]: a text part needs a string 'text'", i, j);
      if (j) text += "\n";
      text += part["text"].get<std::string>();
    }
    message["content"] = text;
    out.push_back(std::move(message));
  }
  return out;
}

ChatTemplateSource chat_template_from_tokenizer_config(const nlohmann::json& config, std::string_view name) {
  FP4_CHECK(config.is_object(), "tokenizer_config.json must hold a JSON object");
  ChatTemplateSource out;
  out.bos_token = token_text(config, "bos_token");
  out.eos_token = token_text(config, "eos_token");
  const auto it = config.find("chat_template");
  FP4_CHECK(it != config.end() && !it->is_null(), "tokenizer_config.json has no chat_template");
  if (it->is_string()) {
    out.source = it->get<std::string>();
    return out;
  }
  FP4_CHECK(it->is_array(), "tokenizer_config.json: chat_template must be a string or a list of named templates");
  std::string names;
  for (const auto& entry : *it) {
    FP4_CHECK(entry.is_object() && entry.contains("name") && entry.contains("template") &&
                  entry["name"].is_string() && entry["template"].is_string(),
              "tokenizer_config.json: each named chat template needs string 'name' and 'template'");
    if (entry["name"].get<std::string>() == name) {
      out.source = entry["template"].get<std::string>();
      return out;
    }
    names += (names.empty() ? "" : ", ") + entry["name"].get<std::string>();
  }
  fail("tokenizer_config.json has no chat template named '{}' (it has: {})", name, names);
}

ChatTemplateSource load_chat_template(const std::filesystem::path& model_dir, std::string_view name) {
  const auto config_path = model_dir / "tokenizer_config.json";
  nlohmann::json config = nlohmann::json::object();
  if (std::filesystem::exists(config_path)) {
    try {
      config = nlohmann::json::parse(read_file(config_path));
    } catch (const nlohmann::json::exception& e) {
      fail("{}: {}", config_path.string(), e.what());
    }
  }
  ChatTemplateSource out;
  if (std::filesystem::exists(model_dir / "chat_template.jinja")) {
    out.source = read_file(model_dir / "chat_template.jinja");
  } else if (std::filesystem::exists(model_dir / "chat_template.json")) {
    const auto path = model_dir / "chat_template.json";
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(read_file(path));
    } catch (const nlohmann::json::exception& e) {
      fail("{}: {}", path.string(), e.what());
    }
    FP4_CHECK(j.is_object() && j.contains("chat_template") && j["chat_template"].is_string(),
              "{}: expected an object with a string 'chat_template'", path.string());
    out.source = j["chat_template"].get<std::string>();
  } else {
    FP4_CHECK(config.contains("chat_template"), "{} has no chat template (no chat_template.jinja, "
              "chat_template.json, or chat_template in tokenizer_config.json)", model_dir.string());
    out = chat_template_from_tokenizer_config(config, name);
    return out;
  }
  if (config.is_object()) {
    out.bos_token = token_text(config, "bos_token");
    out.eos_token = token_text(config, "eos_token");
  }
  return out;
}

}  // namespace fp4::chat
