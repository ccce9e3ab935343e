// The chat template the server renders conversations with: --chat-template (a file, or the
// template text itself) or the model directory's own (chat_template.jinja, chat_template.json,
// tokenizer_config.json). Empty when there is none.
#pragma once

#include <filesystem>
#include <string>

#include "server/openai_server.h"
#include "tokenizer/tokenizer.h"

namespace fp4::cli {

server::ChatRenderer make_chat_renderer(const std::filesystem::path& model_dir,
                                        const std::string& chat_template_flag,
                                        const tokenizer::Tokenizer& tokenizer);

}  // namespace fp4::cli
