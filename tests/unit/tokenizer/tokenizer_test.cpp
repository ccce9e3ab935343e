// The whole pipeline on small hand-made files: added tokens, normalization, the post-processor,
// tokenizer_config.json, decoding, refusals, and round trips of random text.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "tests/support/expect_error.h"
#include "tests/support/random.h"
#include "tests/unit/tokenizer/test_tokenizers.h"
#include "tokenizer/unicode.h"

namespace fp4::tokenizer {
namespace {

using testing::json;
using Ids = std::vector<int32_t>;

// Ids: <unk> <s> </s> = 0 1 2, bytes 3..258, ▁ h i t o k = 259..264, hi = 265, ▁hi = 266, then
// the added tokens <t> <tt> <m> tok "h i" = 267..271.
json llama_with_added_tokens() {
  json tj = testing::llama_style({"▁", "h", "i", "t", "o", "k"}, {{"h", "i"}, {"▁", "hi"}});
  json strip = testing::added_token(269, "<m>", false);
  strip["lstrip"] = strip["rstrip"] = true;
  json single = testing::added_token(270, "tok", false);
  single["single_word"] = true;
  tj["added_tokens"].push_back(testing::added_token(267, "<t>", true));
  tj["added_tokens"].push_back(testing::added_token(268, "<tt>", true));
  tj["added_tokens"].push_back(strip);
  tj["added_tokens"].push_back(single);
  tj["added_tokens"].push_back(testing::added_token(271, "h i", false, /*normalized=*/true));
  return tj;
}

TEST(Tokenizer, EncodesAndDecodesLikeLlama) {
  const Tokenizer t = testing::load(llama_with_added_tokens());
  EXPECT_EQ(t.encode("hi hi", false), (Ids{266, 266}));  // "▁hi▁hi": hi twice, then ▁hi twice
  EXPECT_EQ(t.encode("hi hi", true), (Ids{1, 266, 266}));
  EXPECT_EQ(t.encode("", false), Ids{});
  EXPECT_EQ(t.encode("", true), Ids{1});
  EXPECT_EQ(t.decode(Ids{1, 266, 266}, false),
            "<s> hi hi");  // only the very first space is stripped
  EXPECT_EQ(t.decode(Ids{1, 266, 266}, true), "hi hi");
  EXPECT_EQ(t.decode(Ids{266, 99999, -1, 266}, true), "hi hi");  // ids without a token are skipped
  EXPECT_EQ(t.encode("hé", false), (Ids{259, 260, 3 + 0xC3, 3 + 0xA9}));  // é by byte fallback
  EXPECT_EQ(t.decode(Ids{259, 260, 3 + 0xC3, 3 + 0xA9}, false), "hé");
  EXPECT_EQ(t.decode(Ids{3 + 0xC3, 266}, false), "\xEF\xBF\xBD hi");  // a broken byte run: U+FFFD
}

TEST(Tokenizer, MatchesAddedTokensLeftmostLongest) {
  const Tokenizer t = testing::load(llama_with_added_tokens());
  EXPECT_EQ(t.encode("<tt><t>", false), (Ids{268, 267}));
  // Every stretch between added tokens is normalized on its own, so each gets its own ▁.
  EXPECT_EQ(t.encode("hi<t>hi", false), (Ids{266, 267, 266}));
  EXPECT_EQ(t.encode("hi <t> hi", false), (Ids{266, 259, 267, 259, 266}));
  // <m> swallows the whitespace on both sides.
  EXPECT_EQ(t.encode("hi  <m>  hi", false), (Ids{266, 269, 266}));
  // tok only matches as a word of its own.
  EXPECT_EQ(t.encode("hi tok", false), (Ids{266, 259, 270}));
  EXPECT_EQ(t.encode("hitok", false), (Ids{266, 262, 263, 264}));
  // "h i" is matched in normalized text, as "▁h▁i", and decodes from that form.
  EXPECT_EQ(t.encode("hi h i", false), (Ids{266, 271}));
  EXPECT_EQ(t.id_to_token(271), "▁h▁i");
  EXPECT_EQ(t.decode(Ids{271}, false), "h i");
}

TEST(Tokenizer, VocabularyAndSpecialTokens) {
  const Tokenizer t = testing::load(llama_with_added_tokens());
  EXPECT_EQ(t.vocab_size(), 272);
  EXPECT_EQ(t.token_to_id("<m>"), 269);
  EXPECT_EQ(t.token_to_id("▁hi"), 266);
  EXPECT_EQ(t.token_to_id("<0x0A>"), 3 + 0x0A);
  EXPECT_EQ(t.token_to_id("nope"), std::nullopt);
  EXPECT_EQ(t.id_to_token(5), "<0x02>");
  EXPECT_EQ(t.id_to_token(272), std::nullopt);
  EXPECT_TRUE(t.is_special(1) && t.is_special(267));
  EXPECT_FALSE(t.is_special(269) || t.is_special(266) || t.is_special(-3));
  // Without tokenizer_config.json the BOS and EOS are unknown; the template still adds <s>.
  EXPECT_EQ(t.bos_id(), -1);
  EXPECT_EQ(t.eos_id(), -1);
  EXPECT_TRUE(t.add_bos_token());
}

TEST(Tokenizer, ReadsTokenizerConfigNextToTheFile) {
  auto rng = fp4::testing::seeded_rng();
  const auto dir = std::filesystem::temp_directory_path() / fmt::format("fp4_tokenizer_{}", rng());
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << llama_with_added_tokens().dump();
  std::ofstream(dir / "tokenizer_config.json")
      << R"({"bos_token": {"__type": "AddedToken", "content": "<s>"}, "eos_token": "</s>",)"
         R"( "add_bos_token": false})";
  const Tokenizer t = Tokenizer::from_file(dir / "tokenizer.json");
  EXPECT_EQ(t.bos_id(), 1);
  EXPECT_EQ(t.eos_id(), 2);
  EXPECT_FALSE(t.add_bos_token());
  EXPECT_EQ(t.encode("hi", true), (Ids{1, 266}));  // encode follows the post-processor, as HF does

  std::ofstream(dir / "tokenizer_config.json") << R"({"bos_token": "<bos>"})";
  fp4::testing::expect_error([&] { Tokenizer::from_file(dir / "tokenizer.json"); },
                             {"tokenizer_config.json", "bos_token", "'<bos>'"});
  std::filesystem::remove_all(dir);
  fp4::testing::expect_error([&] { Tokenizer::from_file(dir / "tokenizer.json"); },
                             {"cannot open"});
}

TEST(Tokenizer, RefusesWhatItDoesNotSupport) {
  const auto load = [](const json& tj) { testing::load(tj); };
  json tj = testing::llama_style({"▁"}, {});
  tj["post_processor"] = {{"type", "BertProcessing"}};
  fp4::testing::expect_error([&] { load(tj); },
                             {"test/tokenizer.json", "post_processor", "'BertProcessing'"});
  tj = testing::llama_style({"▁"}, {});
  tj["decoder"] = {{"type", "WordPiece"}};
  fp4::testing::expect_error([&] { load(tj); }, {"test/tokenizer.json", "decoder", "'WordPiece'"});
  tj["decoder"] = {{"type", "Sequence"}, {"decoders", json::array({{{"type", "CTC"}}})}};
  fp4::testing::expect_error([&] { load(tj); }, {"decoder.decoders[0]", "'CTC'"});
  tj = testing::llama_style({"▁"}, {});
  tj["normalizer"] = {{"type", "NFKC"}};
  fp4::testing::expect_error([&] { load(tj); }, {"test/tokenizer.json", "normalizer", "'NFKC'"});
  tj = testing::llama_style({"▁"}, {});
  tj.erase("model");
  fp4::testing::expect_error([&] { load(tj); }, {"test/tokenizer.json", "missing field 'model'"});
  fp4::testing::expect_error([] { Tokenizer::from_json("{\"model\": ", "", "bad/tokenizer.json"); },
                             {"bad/tokenizer.json", "not valid JSON"});
  const Tokenizer t = testing::load(testing::llama_style({"▁"}, {}));
  fp4::testing::expect_error([&] { t.encode("ok \xC3\x28", false); },
                             {"not valid UTF-8", "byte 3"});
}

// Random text of letters the vocab has, letters it lacks (byte fallback), spaces and newlines.
std::string random_text(std::mt19937_64& rng, size_t length) {
  const std::vector<std::string> alphabet = {"h",  "i", "t",  " ",      " ",      "  ",
                                             "\n", "é", "中", "😀",      "x",      "7",
                                             "'s", "!", "\t", "\u3000", "\u0301", "Ġ"};
  std::uniform_int_distribution<size_t> pick(0, alphabet.size() - 1);
  std::string text;
  for (size_t i = 0; i < length; ++i) text += alphabet[pick(rng)];
  return text;
}

TEST(Tokenizer, RandomTextRoundTrips) {
  // Both kinds are lossless on text without added tokens: byte fallback and the byte-level map
  // cover every byte, and the SentencePiece decoder strips exactly the ▁ the normalizer added.
  auto rng = fp4::testing::seeded_rng();
  const Tokenizer llama = testing::load(
      testing::llama_style({"▁", "h", "i", "t"}, {{"h", "i"}, {"▁", "hi"}, {"▁", "▁"}}));
  const Tokenizer gpt2 =
      testing::load(testing::byte_level_style({{"Ġ", "h"}, {"h", "i"}, {"Ġh", "i"}, {"Ġ", "Ġ"}}));
  for (int trial = 0; trial < 500; ++trial) {
    const std::string text = random_text(rng, trial % 40);
    ASSERT_EQ(llama.decode(llama.encode(text, false), false), text);
    ASSERT_EQ(gpt2.decode(gpt2.encode(text, false), false), text);
  }
  // Merged tokens: Ġh = 256, hi = 257, Ġhi = 258, ĠĠ = 259; <|endoftext|> = 260.
  EXPECT_EQ(gpt2.encode("hi hi", false), (Ids{257, 258}));
  EXPECT_EQ(gpt2.encode("hi<|endoftext|>", true), (Ids{257, 260}));
  EXPECT_EQ(gpt2.decode(Ids{257, 260}, true), "hi");
}

TEST(Tokenizer, EncodesA32kTokenPromptQuickly) {
  // A Llama-style file has no pre-tokenizer, so a 2^17-character prompt is one BPE word. With
  // the merge queue that costs O(n log n), about 10 ms here; re-scanning the word after every
  // merge would cost O(n^2), minutes. Five seconds separates the two by far more than the
  // machine's speed varies.
  auto rng = fp4::testing::seeded_rng();
  const Tokenizer t = testing::load(
      testing::llama_style({"▁", "h", "i", "t"}, {{"h", "i"}, {"▁", "hi"}, {"t", "hi"}}));
  const std::string text = random_text(rng, 1 << 17);
  const auto start = std::chrono::steady_clock::now();
  const Ids ids = t.encode(text, true);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 5.0);
  EXPECT_EQ(t.decode(ids, true), text);
}

}  // namespace
}  // namespace fp4::tokenizer
