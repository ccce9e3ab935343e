// Streaming detokenization: what comes out as ids arrive, and that it always adds up to decode().
#include "tokenizer/incremental_detokenizer.h"

#include <gtest/gtest.h>

#include "tests/support/random.h"
#include "tests/unit/tokenizer/test_tokenizers.h"

namespace fp4::tokenizer {
namespace {

using testing::json;
using Ids = std::vector<int32_t>;

// What each push returned, then what finish() returned.
std::vector<std::string> stream(const Tokenizer& t, const Ids& ids, bool skip_special_tokens) {
  IncrementalDetokenizer detokenizer(t, skip_special_tokens);
  std::vector<std::string> out;
  for (int32_t id : ids) out.push_back(detokenizer.push(id));
  out.push_back(detokenizer.finish());
  return out;
}

using Chunks = std::vector<std::string>;

// Ids: <unk> <s> </s> = 0 1 2, byte b = 3 + b, ▁ h i = 259 260 261, hi = 262, ▁hi = 263.
Tokenizer llama() {
  return testing::load(testing::llama_style({"▁", "h", "i"}, {{"h", "i"}, {"▁", "hi"}}));
}
constexpr int32_t byte_token(uint8_t b) { return 3 + b; }

TEST(IncrementalDetokenizer, StripsTheLeadingSpaceOnce) {
  const Tokenizer t = llama();
  EXPECT_EQ(stream(t, {263, 263}, false), (Chunks{"hi", " hi", ""}));
  // The first token is only a space: it is stripped, and the strip is then used up.
  EXPECT_EQ(stream(t, {259, 263}, false), (Chunks{"", " hi", ""}));
  // A skipped <s> does not count as the start of the text; a kept one does.
  EXPECT_EQ(stream(t, {1, 263}, true), (Chunks{"", "hi", ""}));
  EXPECT_EQ(stream(t, {1, 263}, false), (Chunks{"<s>", " hi", ""}));
}

TEST(IncrementalDetokenizer, HoldsAByteRunUntilItCloses) {
  const Tokenizer t = llama();
  // 你 = E4 BD A0. The run is decoded as a whole once a non-byte token (or the end) closes it.
  EXPECT_EQ(stream(t, {byte_token(0xE4), byte_token(0xBD), byte_token(0xA0), 263}, false),
            (Chunks{"", "", "", "你 hi", ""}));
  EXPECT_EQ(stream(t, {263, byte_token(0xE4), byte_token(0xBD), byte_token(0xA0)}, false),
            (Chunks{"hi", "", "", "", "你"}));
  // A run that is not valid UTF-8 becomes one U+FFFD per byte, even where a prefix was valid.
  EXPECT_EQ(stream(t, {byte_token('A'), byte_token(0xE4), 263}, false),
            (Chunks{"", "", "\xEF\xBF\xBD\xEF\xBF\xBD hi", ""}));
}

TEST(IncrementalDetokenizer, HoldsAnUnfinishedCharacterOfByteLevelText) {
  const Tokenizer t = testing::load(testing::byte_level_style({}));
  // Byte-level ids are the bytes themselves here.
  EXPECT_EQ(stream(t, {0xE4, 0xBD, 0xA0, 'a'}, false), (Chunks{"", "", "你", "a", ""}));
  EXPECT_EQ(stream(t, {'a', 0xF0, 0x9F}, false), (Chunks{"a", "", "", "\xEF\xBF\xBD"}));
  EXPECT_EQ(stream(t, {0xE4, 'a'}, false), (Chunks{"",
                                                   "\xEF\xBF\xBD"
                                                   "a",
                                                   ""}));
}

// Ids drawn to hit the hard cases often: byte tokens, specials, spaces.
Ids random_ids(std::mt19937_64& rng, const Tokenizer& t, const Ids& favourites) {
  std::uniform_int_distribution<int32_t> any(-2, t.vocab_size() + 2), length(0, 24);
  std::uniform_int_distribution<size_t> favourite(0, favourites.size() - 1);
  Ids ids;
  for (int i = length(rng); i > 0; --i)
    ids.push_back(rng() % 2 ? favourites[favourite(rng)] : any(rng));
  return ids;
}

void expect_streams_add_up(const Tokenizer& t, const Ids& favourites, uint64_t salt) {
  auto rng = fp4::testing::seeded_rng(salt);
  for (int trial = 0; trial < 3000; ++trial) {
    const Ids ids = random_ids(rng, t, favourites);
    for (bool skip : {false, true}) {
      std::string joined;
      for (const std::string& chunk : stream(t, ids, skip)) joined += chunk;
      ASSERT_EQ(joined, t.decode(ids, skip))
          << "ids " << ::testing::PrintToString(ids) << " skip " << skip;
    }
  }
}

TEST(IncrementalDetokenizer, AddsUpToDecodeOnRandomIds) {
  Ids llama_favourites = {0, 1, 2, 259, 263, byte_token(' '), byte_token('A')};
  for (int b : {0xC3, 0xA9, 0xE4, 0xBD, 0xA0, 0xF0, 0x9F, 0x98, 0x80, 0xFF})
    llama_favourites.push_back(byte_token(b));
  expect_streams_add_up(llama(), llama_favourites, 1);

  json metaspace = testing::llama_style({"▁", "h", "i"}, {{"h", "i"}, {"▁", "hi"}});
  metaspace["normalizer"] = nullptr;
  metaspace["pre_tokenizer"] = {
      {"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "first"}};
  metaspace["decoder"] = metaspace["pre_tokenizer"];
  expect_streams_add_up(testing::load(metaspace), llama_favourites, 2);

  json no_decoder = metaspace;
  no_decoder["decoder"] = nullptr;
  expect_streams_add_up(testing::load(no_decoder), llama_favourites, 3);

  const Tokenizer gpt2 = testing::load(testing::byte_level_style({{"Ġ", "h"}}));
  expect_streams_add_up(gpt2, {0xE4, 0xBD, 0xA0, 0xF0, 0x9F, 0x98, 0x80, 0xC3, 'a', 256, 257}, 4);
}

}  // namespace
}  // namespace fp4::tokenizer
