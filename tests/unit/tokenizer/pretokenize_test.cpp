// Normalizers and pre-tokenizers on hand-checked inputs.
#include "tokenizer/pretokenize.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/support/expect_error.h"
#include "tests/support/random.h"
#include "tokenizer/unicode.h"

namespace fp4::tokenizer {
namespace {

using nlohmann::json;

std::vector<std::string> gpt2(std::string_view text) {
  std::vector<std::string_view> pieces;
  split_gpt2(text, pieces);
  return {pieces.begin(), pieces.end()};
}

using Pieces = std::vector<std::string>;

TEST(SplitGpt2, FollowsTheRegexAlternativesInOrder) {
  EXPECT_EQ(gpt2("Hello world"), (Pieces{"Hello", " world"}));
  EXPECT_EQ(gpt2("don't we'll I'M"), (Pieces{"don", "'t", " we", "'ll", " I", "'", "M"}));
  EXPECT_EQ(gpt2("abc123 456!?"), (Pieces{"abc", "123", " 456", "!?"}));
  // A run of spaces before a word gives up its last space to the word ("\s+(?!\S)").
  EXPECT_EQ(gpt2("a   b"), (Pieces{"a", "  ", " b"}));
  EXPECT_EQ(gpt2("a \n b"), (Pieces{"a", " \n", " b"}));
  EXPECT_EQ(gpt2("a\nb"), (Pieces{"a", "\n", "b"}));  // a lone newline is "\s+"
  EXPECT_EQ(gpt2("end   "), (Pieces{"end", "   "}));  // trailing whitespace stays whole
  EXPECT_EQ(gpt2(" "), (Pieces{" "}));
  EXPECT_EQ(gpt2(" !!"), (Pieces{" !!"}));
  EXPECT_EQ(gpt2("x\t\ty"), (Pieces{"x", "\t", "\t", "y"}));  // only a literal space joins a word
  EXPECT_EQ(gpt2("café 中文 ½"), (Pieces{"café", " 中文", " ½"}));
  EXPECT_EQ(gpt2("e\u0301"), (Pieces{"e", "\u0301"}));  // a combining mark is neither L nor N
}

TEST(SplitGpt2, CoversRandomTextExactly) {
  auto rng = fp4::testing::seeded_rng();
  const std::vector<std::string> alphabet = {"a", "Z", "é",      "中",     "7", "½",
                                             " ", " ", "\n",     "\t",     "'", "s",
                                             "!", "😀", "\u3000", "\u0301", "ll"};
  std::uniform_int_distribution<size_t> pick(0, alphabet.size() - 1);
  for (int trial = 0; trial < 2000; ++trial) {
    std::string text;
    for (int i = 0; i < 30; ++i) text += alphabet[pick(rng)];
    std::string joined;
    for (const std::string& piece : gpt2(text)) {
      ASSERT_FALSE(piece.empty());
      joined += piece;
    }
    ASSERT_EQ(joined, text);
  }
}

TEST(ByteLevel, MapsEveryByteToADistinctCharacter) {
  EXPECT_EQ(byte_level_char(' '), "Ġ");
  EXPECT_EQ(byte_level_char('\n'), "Ċ");
  EXPECT_EQ(byte_level_char('A'), "A");
  EXPECT_EQ(byte_level_char(0xE9), "é");  // printable Latin-1 stands for itself
  for (int b = 0; b < 256; ++b) {
    const std::string_view c = byte_level_char(static_cast<uint8_t>(b));
    size_t pos = 0;
    const char32_t cp = next_char(c, pos);
    ASSERT_EQ(pos, c.size());
    ASSERT_EQ(byte_level_byte(cp), b);
  }
  EXPECT_EQ(byte_level_byte(U'\u0144'), -1);  // past the 256 stand-ins
}

std::vector<std::string> pre_tokenize(const json& config, const std::string& text,
                                      bool at_origin = true) {
  const PreTokenizer pre = PreTokenizer::from_json(config, {"tokenizer.json", "pre_tokenizer"});
  std::vector<Piece> words;
  pre.split({text, at_origin}, words);
  std::vector<std::string> out;
  for (const Piece& w : words) out.push_back(w.text);
  return out;
}

TEST(Metaspace, PrependsAndSplitsBeforeEachReplacement) {
  const json always = {
      {"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "always"}, {"split", true}};
  EXPECT_EQ(pre_tokenize(always, "Hello  world"), (Pieces{"▁Hello", "▁", "▁world"}));
  EXPECT_EQ(pre_tokenize(always, " x", false), (Pieces{"▁x"}));  // already starts with one
  json first = always;
  first["prepend_scheme"] = "first";
  EXPECT_EQ(pre_tokenize(first, "a b", true), (Pieces{"▁a", "▁b"}));
  EXPECT_EQ(pre_tokenize(first, "a b", false), (Pieces{"a", "▁b"}));
  json never_whole = {
      {"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "never"}, {"split", false}};
  EXPECT_EQ(pre_tokenize(never_whole, "a b "), (Pieces{"a▁b▁"}));
  // Older files say add_prefix_space instead of prepend_scheme.
  const json legacy = {{"type", "Metaspace"}, {"replacement", "▁"}, {"add_prefix_space", false}};
  EXPECT_EQ(pre_tokenize(legacy, "a b"), (Pieces{"a", "▁b"}));
}

TEST(PreTokenizer, SplitThenByteLevelEqualsByteLevelWithItsRegex) {
  const json sequence = {{"type", "Sequence"},
                         {"pretokenizers",
                          {{{"type", "Split"},
                            {"pattern", {{"Regex", std::string(kGpt2Pattern)}}},
                            {"behavior", "Isolated"},
                            {"invert", false}},
                           {{"type", "ByteLevel"},
                            {"add_prefix_space", false},
                            {"trim_offsets", true},
                            {"use_regex", false}}}}};
  const json byte_level = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}};
  const std::string text = "Hi  there,\nworld's 42 café";
  EXPECT_EQ(pre_tokenize(sequence, text), pre_tokenize(byte_level, text));
  EXPECT_EQ(pre_tokenize(byte_level, "a b"), (Pieces{"a", "Ġb"}));
}

TEST(PreTokenizer, RefusesWhatItCannotDo) {
  const auto parse = [](const json& config) {
    PreTokenizer::from_json(config, {"x/tokenizer.json", "pre_tokenizer"});
  };
  fp4::testing::expect_error(
      [&] {
        parse({{"type", "Whitespace"}});
      },
      {"x/tokenizer.json", "pre_tokenizer", "'Whitespace'"});
  fp4::testing::expect_error(
      [&] {
        parse({{"type", "Split"},
               {"pattern", {{"Regex", "\\s+"}}},
               {"behavior", "Isolated"},
               {"invert", false}});
      },
      {"x/tokenizer.json", "Split", "'\\s+'", "not supported"});
  fp4::testing::expect_error(
      [&] {
        parse({{"type", "Split"},
               {"pattern", {{"Regex", std::string(kGpt2Pattern)}}},
               {"behavior", "Removed"}});
      },
      {"behavior 'Removed'"});
}

TEST(Normalizer, PrependsAndReplaces) {
  const json llama = {{"type", "Sequence"},
                      {"normalizers",
                       {{{"type", "Prepend"}, {"prepend", "▁"}},
                        {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "▁"}}}}};
  const Normalizer n = Normalizer::from_json(llama, {"tokenizer.json", "normalizer"});
  EXPECT_EQ(n.apply("Hello  world "), "▁Hello▁▁world▁");
  EXPECT_EQ(n.apply(""), "");  // Prepend leaves empty text alone
  fp4::testing::expect_error(
      [] {
        Normalizer::from_json({{"type", "NFKC"}}, {"m/tokenizer.json", "normalizer"});
      },
      {"m/tokenizer.json", "normalizer", "'NFKC'", "not supported"});
  fp4::testing::expect_error(
      [] {
        Normalizer::from_json(
            {{"type", "Replace"}, {"pattern", {{"Regex", " +"}}}, {"content", " "}},
            {"tokenizer.json", "normalizer"});
      },
      {"regex", "' +'"});
}

}  // namespace
}  // namespace fp4::tokenizer
