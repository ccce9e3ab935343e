// ChatTemplate, the API the server uses: rendering OpenAI messages, content parts, the context
// variables, errors, and finding a model's template on disk.
#include "chat/chat_template.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace fp4::chat {
namespace {

using nlohmann::ordered_json;

const char* kChatML =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
    "'\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

std::string read(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(ChatTemplate, RendersChatML) {
  const ChatTemplate t = ChatTemplate::parse(kChatML);
  const ordered_json messages = {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hi"}}};
  ChatTemplateContext ctx;
  EXPECT_EQ(t.render(messages, ctx),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  ctx.add_generation_prompt = false;
  EXPECT_EQ(t.render(messages, ctx), "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
  // nlohmann::json works too (its keys are sorted, which ChatML does not notice).
  EXPECT_EQ(t.render(nlohmann::json(messages), ctx), t.render(messages, ctx));
}

TEST(ChatTemplate, ContextVariables) {
  const ChatTemplate t = ChatTemplate::parse(
      "{{ bos_token is defined }}{{ bos_token }}|{{ eos_token }}|{{ tools is none }}|{{ documents is none }}|"
      "{{ tools|tojson }}|{{ enable_thinking }}|{{ add_generation_prompt }}");
  ChatTemplateContext ctx;
  EXPECT_EQ(t.render(ordered_json::array(), ctx), "False||True|True|null||True");
  ctx.bos_token = "<s>";
  ctx.eos_token = "</s>";
  ctx.tools = ordered_json::parse(R"([{"type": "function", "function": {"name": "f", "a": 1}}])");
  ctx.extra = {{"enable_thinking", false}, {"eos_token", "<eos-override>"}};
  EXPECT_EQ(t.render(ordered_json::array(), ctx),
            "True<s>|<eos-override>|False|True|[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"a\": 1}}]|False|True");
}

TEST(ChatTemplate, KeepsTheRequestsKeyOrder) {
  const ChatTemplate t = ChatTemplate::parse("{{ messages[0]|tojson }}");
  const auto messages = ordered_json::parse(R"([{"role": "user", "content": "x", "b": 1, "a": 2}])");
  EXPECT_EQ(t.render(messages, {}), R"({"role": "user", "content": "x", "b": 1, "a": 2})");
}

TEST(ChatTemplate, ContentPartsAreJoinedForStringTemplates) {
  const ChatTemplate t = ChatTemplate::parse(kChatML);
  EXPECT_EQ(t.detected_content_format(), ContentFormat::kString);
  const auto messages = ordered_json::parse(
      R"([{"role": "user", "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]}])");
  ChatTemplateContext ctx;
  ctx.add_generation_prompt = false;
  EXPECT_EQ(t.render(messages, ctx), "<|im_start|>user\none\ntwo<|im_end|>\n");
}

TEST(ChatTemplate, TemplatesThatWalkContentGetTheParts) {
  const ChatTemplate t = ChatTemplate::parse(
      "{% for m in messages %}{% for part in m['content'] | selectattr('type', 'equalto', 'text') %}[{{ part.text }}]"
      "{% endfor %}{% endfor %}");
  EXPECT_EQ(t.detected_content_format(), ContentFormat::kOpenAI);
  const auto messages = ordered_json::parse(
      R"([{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {}}]}])");
  EXPECT_EQ(t.render(messages, {}), "[a]");
  ChatTemplateContext as_string;
  as_string.content_format = ContentFormat::kString;
  EXPECT_THROW(t.render(messages, as_string), fp4::Error);
}

TEST(ChatTemplate, PrepareMessagesNamesTheBadField) {
  auto message_of = [](const ordered_json& messages) {
    try {
      prepare_messages(messages, ContentFormat::kString);
    } catch (const fp4::Error& e) {
      return std::string(e.what());
    }
    return std::string("<no error>");
  };
  EXPECT_EQ(message_of(ordered_json::object()), "messages must be an array, got object");
  EXPECT_EQ(message_of(ordered_json::parse(R"([{"role": "user"}, 3])")), "messages[1] must be an object, got number");
  EXPECT_EQ(message_of(ordered_json::parse(R"([{"role": "user", "content": [{"type": "image_url"}]}])")),
            "messages[0].content[0]: content of type 'image_url' is not supported, only 'text'");
  EXPECT_EQ(message_of(ordered_json::parse(R"([{"role": "user", "content": [{"type": "text"}]}])")),
            "messages[0].content[0]: a text part needs a string 'text'");
  // null content (an assistant turn with tool calls) passes through.
  const auto ok = prepare_messages(ordered_json::parse(R"([{"role": "assistant", "content": null}])"), ContentFormat::kString);
  EXPECT_TRUE(ok[0]["content"].is_null());
}

TEST(ChatTemplate, ErrorsForTheClientAndForTheOperator) {
  const ChatTemplate t = ChatTemplate::parse(
      "{% if messages[0]['role'] != 'user' %}{{ raise_exception('Conversation must start with a user message') }}"
      "{% endif %}{{ messages[0].content.upper() }}");
  try {
    t.render(ordered_json::parse(R"([{"role": "system", "content": "x"}])"), {});
    FAIL() << "no exception";
  } catch (const jinja::TemplateRaised& e) {
    EXPECT_STREQ(e.what(), "Conversation must start with a user message");
  }
  try {
    t.render(ordered_json::parse(R"([{"role": "user", "content": 5}])"), {});
    FAIL() << "no exception";
  } catch (const jinja::TemplateRaised&) {
    FAIL() << "a type error is not the template's own message";
  } catch (const fp4::Error& e) {
    EXPECT_STREQ(e.what(), "chat template error at line 1, column 146: 'int object' has no attribute 'upper'");
  }
  try {
    ChatTemplate::parse("{% for m in messages %}\n{{ m.content }\n{% endfor %}");
    FAIL() << "no exception";
  } catch (const fp4::Error& e) {
    EXPECT_STREQ(e.what(), "chat template syntax error at line 2, column 14: unexpected '}'");
  }
}

TEST(ChatTemplate, StrftimeNowUsesTheContextsClock) {
  setenv("TZ", "UTC", 1);
  tzset();
  const ChatTemplate t = ChatTemplate::parse("{{ strftime_now('%d %b %Y') }}");
  ChatTemplateContext ctx;
  ctx.now = std::chrono::system_clock::from_time_t(1718000000);
  EXPECT_EQ(t.render(ordered_json::array(), ctx), "10 Jun 2024");
}

TEST(ChatTemplate, EveryFixtureTemplateParses) {
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(FP4_CHAT_TEMPLATES_DIR)) {
    if (entry.path().extension() != ".jinja") continue;
    const ChatTemplate t = ChatTemplate::parse(read(entry.path()));
    const std::string stem = entry.path().stem().string();
    const bool walks_content = stem == "minimax_text01" || stem == "minimax_m2";
    EXPECT_EQ(t.detected_content_format(), walks_content ? ContentFormat::kOpenAI : ContentFormat::kString) << stem;
    ++count;
  }
  EXPECT_GE(count, 8);
}

TEST(ChatTemplate, Llama3FromItsFixture) {
  const ChatTemplate t = ChatTemplate::parse(read(std::filesystem::path(FP4_CHAT_TEMPLATES_DIR) / "llama3.jinja"));
  ChatTemplateContext ctx;
  ctx.bos_token = "<|begin_of_text|>";
  const auto messages = ordered_json::parse(R"([{"role": "user", "content": "  Hi there \n"}])");
  EXPECT_EQ(t.render(messages, ctx),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

class ModelDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("fp4_chat_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void write(const std::string& name, const std::string& text) { std::ofstream(dir_ / name) << text; }
  std::filesystem::path dir_;
};

TEST_F(ModelDir, TokenizerConfigTemplateAndTokens) {
  write("tokenizer_config.json",
        R"({"bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>", "chat_template": "{{ bos_token }}x"})");
  const ChatTemplateSource src = load_chat_template(dir_);
  EXPECT_EQ(src.source, "{{ bos_token }}x");
  EXPECT_EQ(src.bos_token, "<s>");
  EXPECT_EQ(src.eos_token, "</s>");
}

TEST_F(ModelDir, JinjaFileWinsOverTheConfig) {
  write("tokenizer_config.json", R"({"eos_token": "</s>", "chat_template": "old"})");
  write("chat_template.jinja", "new\n");
  const ChatTemplateSource src = load_chat_template(dir_);
  EXPECT_EQ(src.source, "new\n");
  EXPECT_EQ(src.eos_token, "</s>");
  EXPECT_FALSE(src.bos_token.has_value());
}

TEST_F(ModelDir, NamedTemplates) {
  write("tokenizer_config.json",
        R"({"chat_template": [{"name": "default", "template": "D"}, {"name": "tool_use", "template": "T"}]})");
  EXPECT_EQ(load_chat_template(dir_).source, "D");
  EXPECT_EQ(load_chat_template(dir_, "tool_use").source, "T");
  try {
    load_chat_template(dir_, "rag");
    FAIL() << "no exception";
  } catch (const fp4::Error& e) {
    EXPECT_STREQ(e.what(), "tokenizer_config.json has no chat template named 'rag' (it has: default, tool_use)");
  }
}

TEST_F(ModelDir, MissingTemplateIsAnError) {
  write("tokenizer_config.json", R"({"eos_token": "</s>"})");
  EXPECT_THROW(load_chat_template(dir_), fp4::Error);
}

}  // namespace
}  // namespace fp4::chat
