// Small tokenizer.json files built in code, for tests whose expected ids are derived by hand.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"

namespace fp4::tokenizer::testing {

using nlohmann::json;
using MergeList = std::vector<std::pair<std::string, std::string>>;

inline json added_token(int id, const std::string& content, bool special, bool normalized = false) {
  return {{"id", id},        {"content", content},       {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", normalized}, {"special", special}};
}

// Adds `token` to the vocab under the next id unless it is there already.
inline void add_to_vocab(json& vocab, const std::string& token) {
  if (!vocab.contains(token)) vocab[token] = static_cast<int>(vocab.size());
}

inline json bpe_model(json vocab, const MergeList& merges) {
  json merge_list = json::array();
  for (const auto& [left, right] : merges) {
    add_to_vocab(vocab, left + right);
    merge_list.push_back({left, right});
  }
  return {{"type", "BPE"},       {"dropout", nullptr},     {"unk_token", nullptr},
          {"fuse_unk", false},   {"byte_fallback", false}, {"vocab", vocab},
          {"merges", merge_list}};
}

// A Llama-style file: <unk>=0 <s>=1 </s>=2, <0x00>..<0xFF> = 3..258, then `pieces` and the
// tokens the merges make, in that order.
inline json llama_style(const std::vector<std::string>& pieces, const MergeList& merges) {
  json vocab = json::object({{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}});
  for (int b = 0; b < 256; ++b) add_to_vocab(vocab, fmt::format("<0x{:02X}>", b));
  for (const std::string& piece : pieces) add_to_vocab(vocab, piece);
  json model = bpe_model(vocab, merges);
  model["unk_token"] = "<unk>";
  model["fuse_unk"] = true;
  model["byte_fallback"] = true;
  return {
      {"version", "1.0"},
      {"added_tokens",
       {added_token(0, "<unk>", true), added_token(1, "<s>", true), added_token(2, "</s>", true)}},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers",
         {{{"type", "Prepend"}, {"prepend", "▁"}},
          {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "▁"}}}}}},
      {"pre_tokenizer", nullptr},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single",
         {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
          {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders",
         {{{"type", "Replace"}, {"pattern", {{"String", "▁"}}}, {"content", " "}},
          {{"type", "ByteFallback"}},
          {{"type", "Fuse"}},
          {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
      {"model", model},
  };
}

// A GPT-2-style file: the 256 byte characters take ids 0..255 in byte order, then the tokens the
// merges make (written in byte characters: "Ġ" is a space); <|endoftext|> is added after them.
inline json byte_level_style(const MergeList& merges) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b)
    add_to_vocab(vocab, std::string(byte_level_char(static_cast<uint8_t>(b))));
  json model = bpe_model(vocab, merges);
  const int end_of_text = static_cast<int>(model["vocab"].size());
  const json byte_level = {{"type", "ByteLevel"},
                           {"add_prefix_space", false},
                           {"trim_offsets", true},
                           {"use_regex", true}};
  return {{"version", "1.0"},
          {"added_tokens", {added_token(end_of_text, "<|endoftext|>", true)}},
          {"normalizer", nullptr},
          {"pre_tokenizer", byte_level},
          {"post_processor", byte_level},
          {"decoder", byte_level},
          {"model", model}};
}

inline Tokenizer load(const json& tokenizer_json, const json& config = nullptr) {
  return Tokenizer::from_json(tokenizer_json.dump(), config.is_null() ? "" : config.dump(),
                              "test/tokenizer.json");
}

}  // namespace fp4::tokenizer::testing
