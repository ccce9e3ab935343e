// The BPE model: merge order, byte fallback and unknown tokens, against hand-derived ids and
// against a slow reference that re-scans the word for its best pair after every merge.
#include "tokenizer/bpe.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <climits>

#include "tests/support/expect_error.h"
#include "tests/support/random.h"
#include "tests/unit/tokenizer/test_tokenizers.h"

namespace fp4::tokenizer {
namespace {

using testing::json;
using testing::MergeList;

json vocab_of(const std::vector<std::string>& tokens) {
  json vocab = json::object();
  for (const std::string& t : tokens) testing::add_to_vocab(vocab, t);
  return vocab;
}

BpeModel model(const json& config) {
  return BpeModel::from_json(config, {"test/tokenizer.json", "model"});
}

std::vector<int32_t> tokenize(const BpeModel& bpe, std::string_view word) {
  std::vector<int32_t> ids;
  bpe.tokenize(word, ids);
  return ids;
}

std::vector<int32_t> ids_of(const BpeModel& bpe, const std::vector<std::string>& tokens) {
  std::vector<int32_t> ids;
  for (const std::string& t : tokens) ids.push_back(bpe.token_to_id(t).value());
  return ids;
}

TEST(Bpe, LowestRankMergesFirst) {
  const BpeModel bc_first =
      model(testing::bpe_model(vocab_of({"a", "b", "c"}), {{"b", "c"}, {"a", "b"}}));
  EXPECT_EQ(tokenize(bc_first, "abc"), ids_of(bc_first, {"a", "bc"}));
  const BpeModel ab_first =
      model(testing::bpe_model(vocab_of({"a", "b", "c"}), {{"a", "b"}, {"b", "c"}}));
  EXPECT_EQ(tokenize(ab_first, "abc"), ids_of(ab_first, {"ab", "c"}));
}

TEST(Bpe, TiesGoLeftmostAndStalePairsAreSkipped) {
  const BpeModel bpe = model(testing::bpe_model(vocab_of({"a"}), {{"a", "a"}, {"aa", "aa"}}));
  EXPECT_EQ(tokenize(bpe, "aaa"), ids_of(bpe, {"aa", "a"}));
  // a|a|a|a: the pair at 0 merges first, which makes the pair at 1 stale; then the pair at 2.
  EXPECT_EQ(tokenize(bpe, "aaaa"), ids_of(bpe, {"aaaa"}));
  EXPECT_EQ(tokenize(bpe, "aaaaa"), ids_of(bpe, {"aaaa", "a"}));
}

TEST(Bpe, ByteFallbackAndUnknownTokens) {
  json config = testing::llama_style({"a"}, {})["model"];
  const BpeModel fallback = model(config);
  EXPECT_EQ(tokenize(fallback, "aé"), ids_of(fallback, {"a", "<0xC3>", "<0xA9>"}));
  config["byte_fallback"] = false;
  const BpeModel fused = model(config);
  EXPECT_EQ(tokenize(fused, "aéü中a"), ids_of(fused, {"a", "<unk>", "a"}));
  config["fuse_unk"] = false;
  const BpeModel unfused = model(config);
  EXPECT_EQ(tokenize(unfused, "aéüa"), ids_of(unfused, {"a", "<unk>", "<unk>", "a"}));
  config["unk_token"] = nullptr;
  const BpeModel dropping = model(config);
  EXPECT_EQ(tokenize(dropping, "aéa"), ids_of(dropping, {"a", "a"}));
}

TEST(Bpe, IgnoreMergesTakesWholeWordsFromTheVocab) {
  json config = testing::bpe_model(vocab_of({"a", "b", "c", "abc"}), {});
  EXPECT_EQ(tokenize(model(config), "abc"), ids_of(model(config), {"a", "b", "c"}));
  config["ignore_merges"] = true;
  EXPECT_EQ(tokenize(model(config), "abc"), ids_of(model(config), {"abc"}));
}

TEST(Bpe, MergesAsStringsOrPairs) {
  json pairs = testing::bpe_model(vocab_of({"x", "y"}), {{"x", "y"}});
  json strings = pairs;
  strings["merges"] = json::array({"x y"});
  EXPECT_EQ(tokenize(model(pairs), "xyx"), tokenize(model(strings), "xyx"));
  EXPECT_EQ(tokenize(model(strings), "xyx"), ids_of(model(strings), {"xy", "x"}));

  json bad = pairs;
  bad["merges"] = json::array({"x y z"});
  fp4::testing::expect_error([&] { model(bad); },
                             {"test/tokenizer.json", "model.merges[0]", "one space"});
  bad["merges"] = json::array({json::array({"x", "q"})});
  fp4::testing::expect_error([&] { model(bad); }, {"model.merges[0]", "'q'", "not in the vocab"});
  bad = testing::bpe_model(vocab_of({"x", "y"}), {});
  bad["merges"] = json::array({json::array({"x", "y"})});  // "xy" is missing from the vocab
  fp4::testing::expect_error([&] { model(bad); }, {"makes 'xy'"});
  bad["type"] = "WordPiece";
  fp4::testing::expect_error([&] { model(bad); },
                             {"test/tokenizer.json", "model", "'WordPiece'", "not supported"});
}

// The textbook algorithm: merge the lowest-ranked adjacent pair (leftmost on ties) until none is
// left.
std::vector<std::string> reference_bpe(const std::string& word, const MergeList& merges) {
  std::vector<std::string> symbols;
  for (char c : word) symbols.emplace_back(1, c);
  while (true) {
    size_t best = SIZE_MAX, best_rank = SIZE_MAX;
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      for (size_t r = 0; r < merges.size() && r < best_rank; ++r) {
        if (merges[r].first == symbols[i] && merges[r].second == symbols[i + 1])
          best = i, best_rank = r;
      }
    }
    if (best == SIZE_MAX) return symbols;
    symbols[best] += symbols[best + 1];
    symbols.erase(symbols.begin() + static_cast<std::ptrdiff_t>(best) + 1);
  }
}

TEST(Bpe, AgreesWithTheTextbookAlgorithmOnRandomMerges) {
  auto rng = fp4::testing::seeded_rng();
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<std::string> tokens = {"a", "b", "c", "d"};
    MergeList merges;
    std::uniform_int_distribution<size_t> count(1, 80);
    for (size_t n = count(rng); merges.size() < n;) {
      std::uniform_int_distribution<size_t> pick(0, tokens.size() - 1);
      const std::string& left = tokens[pick(rng)];
      const std::string& right = tokens[pick(rng)];
      // A repeated pair would take its last rank, which the reference does not model.
      const bool repeated =
          std::find(merges.begin(), merges.end(), std::make_pair(left, right)) != merges.end();
      if (left.size() + right.size() > 8 || repeated) continue;
      merges.emplace_back(left, right);
      if (std::find(tokens.begin(), tokens.end(), left + right) == tokens.end())
        tokens.push_back(left + right);
    }
    const BpeModel bpe = model(testing::bpe_model(vocab_of({"a", "b", "c", "d"}), merges));
    for (int w = 0; w < 40; ++w) {
      std::string word;
      std::uniform_int_distribution<int> letter(0, 3), length(1, 60);
      for (int i = length(rng); i > 0; --i) word.push_back(static_cast<char>('a' + letter(rng)));
      ASSERT_EQ(tokenize(bpe, word), ids_of(bpe, reference_bpe(word, merges))) << "word " << word;
    }
  }
}

}  // namespace
}  // namespace fp4::tokenizer
