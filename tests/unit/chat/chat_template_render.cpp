// chat_template_render: fp4serve's chat template renderer on the command line, for comparing it
// with transformers (chat_template_agreement_test.py) and for trying templates by hand.
//
//   chat_template_render TEMPLATE.jinja MESSAGES.json [--no-generation-prompt] [--bos T] [--eos T]
//       prints the prompt; an error goes to stderr with exit status 1 (2 for a syntax error).
//   chat_template_render --batch
//       reads one JSON request per line on stdin and answers one JSON line each:
//       {"template": str, "messages": [...], "add_generation_prompt": bool, "bos_token": str,
//        "eos_token": str, "tools": [...], "extra": {...}, "now": epoch seconds,
//        "content_format": "auto"|"string"|"openai"}
//       -> {"ok": true, "text": str, "content_format": "string"|"openai"}
//        | {"ok": false, "kind": "syntax"|"raised"|"error", "message": str}
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "chat/chat_template.h"
#include "core/check.h"

namespace {

using fp4::chat::ChatTemplate;
using fp4::chat::ChatTemplateContext;
using fp4::chat::ContentFormat;
using nlohmann::ordered_json;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  FP4_CHECK(in.good(), "{}: cannot open the file", path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

ordered_json answer(const ordered_json& request) {
  ChatTemplateContext ctx;
  ctx.add_generation_prompt = request.value("add_generation_prompt", true);
  if (request.contains("bos_token")) ctx.bos_token = request["bos_token"].get<std::string>();
  if (request.contains("eos_token")) ctx.eos_token = request["eos_token"].get<std::string>();
  if (request.contains("tools")) ctx.tools = request["tools"];
  if (request.contains("extra")) ctx.extra = request["extra"];
  if (request.contains("now")) {
    ctx.now = std::chrono::system_clock::time_point(std::chrono::seconds(request["now"].get<int64_t>()));
  }
  const std::string format = request.value("content_format", "auto");
  ctx.content_format = format == "string" ? ContentFormat::kString
                       : format == "openai" ? ContentFormat::kOpenAI
                                            : ContentFormat::kAuto;
  std::optional<ChatTemplate> tmpl;
  try {
    tmpl = ChatTemplate::parse(request.at("template").get<std::string>());
  } catch (const fp4::Error& e) {
    return {{"ok", false}, {"kind", "syntax"}, {"message", e.what()}};
  }
  try {
    const std::string text = tmpl->render(request.at("messages"), ctx);
    const bool openai = (ctx.content_format == ContentFormat::kAuto ? tmpl->detected_content_format()
                                                                     : ctx.content_format) == ContentFormat::kOpenAI;
    return {{"ok", true}, {"text", text}, {"content_format", openai ? "openai" : "string"}};
  } catch (const fp4::chat::jinja::TemplateRaised& e) {
    return {{"ok", false}, {"kind", "raised"}, {"message", e.what()}};
  } catch (const fp4::Error& e) {
    return {{"ok", false}, {"kind", "error"}, {"message", e.what()}};
  }
}

int batch() {
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    std::cout << answer(ordered_json::parse(line)).dump(-1, ' ', false, ordered_json::error_handler_t::replace)
              << '\n'
              << std::flush;
  }
  return 0;
}

int single(int argc, char** argv) {
  FP4_CHECK(argc >= 3, "usage: {} TEMPLATE.jinja MESSAGES.json [--no-generation-prompt] [--bos T] [--eos T] "
            "| --batch", argv[0]);
  ChatTemplateContext ctx;
  for (int i = 3; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--no-generation-prompt") {
      ctx.add_generation_prompt = false;
    } else if ((arg == "--bos" || arg == "--eos") && i + 1 < argc) {
      (arg == "--bos" ? ctx.bos_token : ctx.eos_token) = argv[++i];
    } else {
      fp4::fail("unknown argument '{}'", arg);
    }
  }
  ChatTemplate tmpl = [&] {
    try {
      return ChatTemplate::parse(read_file(argv[1]));
    } catch (const fp4::Error& e) {
      std::cerr << argv[1] << ": " << e.what() << '\n';
      std::exit(2);
    }
  }();
  const std::string messages = std::string(argv[2]) == "-" ? std::string(std::istreambuf_iterator<char>(std::cin), {})
                                                           : read_file(argv[2]);
  std::cout << tmpl.render(ordered_json::parse(messages), ctx);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc == 2 && std::string(argv[1]) == "--batch") return batch();
    return single(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << e.what() << '\n';
    return 1;
  }
}
