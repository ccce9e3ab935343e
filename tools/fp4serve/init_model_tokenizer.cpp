// The random model's tokenizer: byte-level BPE in the Hugging Face tokenizer.json format, which
// both fp4serve's tokenizer and the `tokenizers` library read.
#include <array>
#include <string>
#include <utility>

#include "tokenizer/pretokenize.h"
#include "tools/fp4serve/init_model.h"

namespace fp4::init_model {
namespace {

using nlohmann::ordered_json;

constexpr int32_t kByteTokens = 256;
// A space followed by a letter starts most words of Latin-script text; these merges make
// "Hello world" three tokens, enough to exercise the merge path of a tokenizer.
const std::string& merge_letters() {
  static const std::string letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
  return letters;
}

std::string byte_symbol(char c) { return std::string(tokenizer::byte_level_char(static_cast<uint8_t>(c))); }

ordered_json byte_level(bool add_prefix_space, bool trim_offsets) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", add_prefix_space},
          {"trim_offsets", trim_offsets}, {"use_regex", true}};
}

// ChatML as the Hugging Face documentation writes it: each message framed by <|im_start|>role
// and <|im_end|>, and the opening of the assistant's turn when a reply is wanted.
constexpr const char* kChatTemplate =
    R"({% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %})";

}  // namespace

TokenIds token_ids() {
  TokenIds ids;
  ids.endoftext = kByteTokens + static_cast<int32_t>(merge_letters().size());
  ids.im_start = ids.endoftext + 1;
  ids.im_end = ids.endoftext + 2;
  ids.vocab_size = ids.im_end + 1;
  return ids;
}

namespace {

std::array<std::pair<int32_t, const char*>, 3> special_tokens() {
  const TokenIds ids = token_ids();
  return {{{ids.endoftext, "<|endoftext|>"}, {ids.im_start, "<|im_start|>"}, {ids.im_end, "<|im_end|>"}}};
}

}  // namespace

ordered_json tokenizer_json() {
  ordered_json vocab = ordered_json::object();
  for (int b = 0; b < kByteTokens; ++b) vocab[byte_symbol(static_cast<char>(b))] = b;
  // "left right" strings, the merge format every tokenizers version reads; unambiguous since
  // the byte-level alphabet has no ASCII space.
  ordered_json merges = ordered_json::array();
  const std::string space = byte_symbol(' ');
  for (char c : merge_letters()) {
    vocab[space + c] = static_cast<int32_t>(vocab.size());
    merges.push_back(space + " " + c);
  }
  ordered_json added = ordered_json::array();
  for (const auto& [id, content] : special_tokens()) {
    added.push_back({{"id", id}, {"content", content}, {"single_word", false}, {"lstrip", false},
                     {"rstrip", false}, {"normalized", false}, {"special", true}});
  }
  ordered_json tok;
  tok["version"] = "1.0";
  tok["truncation"] = nullptr;
  tok["padding"] = nullptr;
  tok["added_tokens"] = added;
  tok["normalizer"] = nullptr;
  tok["pre_tokenizer"] = byte_level(false, true);
  tok["post_processor"] = byte_level(false, false);
  tok["decoder"] = byte_level(true, true);
  tok["model"] = {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr},
                  {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr},
                  {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", false},
                  {"vocab", vocab}, {"merges", merges}};
  return tok;
}

ordered_json tokenizer_config_json(const RandomModelPreset& preset) {
  ordered_json decoder = ordered_json::object();
  for (const auto& [id, content] : special_tokens()) {
    decoder[std::to_string(id)] = {{"content", content}, {"lstrip", false}, {"normalized", false},
                                   {"rstrip", false}, {"single_word", false}, {"special", true}};
  }
  return {{"tokenizer_class", "PreTrainedTokenizerFast"},
          {"added_tokens_decoder", decoder},
          {"bos_token", "<|endoftext|>"},
          {"eos_token", "<|im_end|>"},
          {"pad_token", "<|endoftext|>"},
          {"unk_token", nullptr},
          {"add_bos_token", false},
          {"add_eos_token", false},
          {"model_max_length", preset.max_position_embeddings},
          {"clean_up_tokenization_spaces", false},
          {"chat_template", kChatTemplate}};
}

}  // namespace fp4::init_model
