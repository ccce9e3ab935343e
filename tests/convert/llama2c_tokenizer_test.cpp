// llama2.c tokenizer files and their Hugging Face form. Agreement of the converted tokenizer
// with llama2.c's encoder on the real 512-token vocabulary is llama2c_convert_test.py.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "tests/support/expect_error.h"
#include "tests/support/random.h"
#include "tools/fp4serve/llama2c.h"

namespace fp4::convert {
namespace {

namespace fs = std::filesystem;
const std::string kMarker = "\xe2\x96\x81";  // U+2581

struct Record {
  float score;
  std::string piece;
};

std::string encode(int32_t max_len, const std::vector<Record>& records) {
  std::string s(4, '\0');
  std::memcpy(s.data(), &max_len, 4);
  for (const Record& r : records) {
    const auto len = static_cast<int32_t>(r.piece.size());
    s.append(reinterpret_cast<const char*>(&r.score), 4);
    s.append(reinterpret_cast<const char*>(&len), 4);
    s += r.piece;
  }
  return s;
}

// llama2.c's export layout: specials, 256 byte tokens, then merged pieces and single characters
// (a few multi-byte), with random scores.
std::vector<Record> random_vocab(std::mt19937_64& rng) {
  std::normal_distribution<float> score(0.0f, 50.0f);
  std::vector<Record> v = {{0, "<unk>"}, {0, "\n<s>\n"}, {0, "\n</s>\n"}};
  for (int b = 0; b < 256; ++b) v.push_back({0, fmt::format("<0x{:02X}>", b)});
  for (const char* p : {" ", "a", "b", "\xc3\xa9", " a", "ab", " ab", "\xc3\xa9" "a", "b b"}) {
    v.push_back({score(rng), p});
  }
  return v;
}

class Llama2cTokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / (std::string("fp4serve_l2t_") + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& bytes) {
    const fs::path path = dir_ / "tok.bin";
    std::ofstream(path, std::ios::binary) << bytes;
    return path.string();
  }
  fs::path dir_;
};

TEST_F(Llama2cTokenizerTest, ReadsRecordsAndMapsSpacesToTheWordBoundaryMarker) {
  auto rng = testing::seeded_rng(1);
  const std::vector<Record> vocab = random_vocab(rng);
  const Llama2cTokenizer t = read_llama2c_tokenizer(write(encode(7, vocab)), int64_t(vocab.size()));
  ASSERT_EQ(t.pieces.size(), vocab.size());
  for (size_t i = 0; i < vocab.size(); ++i) {
    EXPECT_EQ(t.pieces[i], vocab[i].piece);
    EXPECT_EQ(t.scores[i], vocab[i].score);
  }
  const std::vector<std::string> hf = hf_pieces(t);
  EXPECT_EQ(hf[0], "<unk>");
  EXPECT_EQ(hf[1], "<s>");
  EXPECT_EQ(hf[2], "</s>");
  EXPECT_EQ(hf[3], "<0x00>");
  EXPECT_EQ(hf[259], kMarker);
  EXPECT_EQ(hf[263], kMarker + "a");
  EXPECT_EQ(hf[267], "b" + kMarker + "b") << "every space, not only a leading one";
}

TEST_F(Llama2cTokenizerTest, NamesTheOffsetWhereATruncatedFileEnds) {
  auto rng = testing::seeded_rng(2);
  const std::vector<Record> vocab = random_vocab(rng);
  const std::string bytes = encode(7, vocab);
  const auto n = int64_t(vocab.size());
  // Token 261's record ("a") starts after the 4-byte max_token_length and 261 earlier records.
  size_t at = 4;
  for (size_t i = 0; i < 261; ++i) at += 8 + vocab[i].piece.size();
  const std::pair<size_t, std::string> cuts[] = {
      {2, "the int32 max_token_length (4 bytes) at offset 0"},
      {at + 3, "token 261's float32 score (4 bytes) at offset " + std::to_string(at)},
      {at + 6, "token 261's int32 length (4 bytes) at offset " + std::to_string(at + 4)},
      {at + 8, "token 261's bytes (1 bytes) at offset " + std::to_string(at + 8)}};
  for (const auto& [cut, expected] : cuts) {
    const std::string path = write(bytes.substr(0, cut));
    testing::expect_error([&] { read_llama2c_tokenizer(path, n); },
                          {path, "ends at byte " + std::to_string(cut), expected});
  }
  const std::string longer = write(bytes + "xyz");
  testing::expect_error([&] { read_llama2c_tokenizer(longer, n); },
                        {longer, "3 bytes follow", std::to_string(bytes.size())});
  const std::string missing = (dir_ / "missing.bin").string();
  testing::expect_error([&] { read_llama2c_tokenizer(missing, n); }, {missing});
}

TEST_F(Llama2cTokenizerTest, RefusesBadRecords) {
  auto rng = testing::seeded_rng(3);
  std::vector<Record> vocab = random_vocab(rng);
  const auto n = int64_t(vocab.size());
  auto refuse = [&](int32_t max_len, const std::vector<Record>& v,
                    std::initializer_list<std::string_view> parts) {
    const std::string path = write(encode(max_len, v));
    testing::expect_error([&] { hf_pieces(read_llama2c_tokenizer(path, n)); }, parts);
  };
  refuse(5, vocab, {"token 2 ", "offset 30", "length 6", "max_token_length = 5"});  // "\n</s>\n"
  refuse(0, vocab, {"max_token_length", "is 0"});
  std::vector<Record> v = vocab;
  v[260].score = std::numeric_limits<float>::quiet_NaN();
  refuse(7, v, {"token 260", "finite"});
  v = vocab;
  v[260].piece = "";
  refuse(7, v, {"token 260", "length 0"});
  v = vocab;
  v[1].piece = "<s>";
  refuse(7, v, {"token 1 is \"<s>\"", "\"\\n<s>\\n\""});
  v = vocab;
  v[261].piece = "\xff";
  refuse(7, v, {"token 261", "ff", "UTF-8"});
  v = vocab;
  v[261].piece = kMarker + "a";  // the same piece as " a" once spaces become U+2581
  refuse(7, v, {"tokens 261 and 263", "distinct"});
}

TEST(SentencepieceMerges, RanksEverySplitByTheMergedPiecesScore) {
  // ids:              0        1      2       3    4    5    6     7      8      9      10
  const std::vector<std::string> pieces = {"<unk>", "<s>", "</s>", "a", "b", "c", "ab", "bc", "abc",
                                           "\xc3\xa9", "\xc3\xa9" "a"};
  const std::vector<float> scores = {0, 0, 0, -10, -11, -12, -1, -1, -3, -13, -2};
  const std::vector<std::pair<std::string, std::string>> want = {
      {"a", "b"},             // ab, score -1, id 6
      {"b", "c"},             // bc, score -1, id 7: equal score, higher id
      {"\xc3\xa9", "a"},      // éa, score -2: split only between code points, never inside é
      {"a", "bc"},            // abc, score -3: its splits by the left piece's id (3 < 6)
      {"ab", "c"}};
  EXPECT_EQ(sentencepiece_merges(pieces, scores), want);
}

TEST_F(Llama2cTokenizerTest, TokenizerJsonIsALlamaStyleByteFallbackBpe) {
  auto rng = testing::seeded_rng(4);
  const std::vector<Record> vocab = random_vocab(rng);
  const Llama2cTokenizer t = read_llama2c_tokenizer(write(encode(7, vocab)), int64_t(vocab.size()));
  const nlohmann::ordered_json j = hf_tokenizer_json(t);
  const auto& m = j["model"];
  EXPECT_EQ(m["type"], "BPE");
  EXPECT_EQ(m["byte_fallback"], true);
  EXPECT_EQ(m["fuse_unk"], true);
  EXPECT_EQ(m["unk_token"], "<unk>");
  EXPECT_EQ(m["vocab"].size(), vocab.size());
  EXPECT_EQ(m["vocab"]["<0x41>"], 3 + 0x41);
  EXPECT_EQ(m["vocab"][kMarker + "ab"], 265);
  // " ab" splits into ("▁", "ab") and ("▁a", "b"), "éa" into ("é", "a"), "b b" into none:
  // "b▁" is not a piece.
  EXPECT_EQ(m["merges"].size(), 5u);
  for (const auto& merge : m["merges"]) {
    const std::string text = merge.get<std::string>();
    EXPECT_EQ(std::count(text.begin(), text.end(), ' '), 1) << text;
  }
  EXPECT_EQ(j["normalizer"]["normalizers"][0]["prepend"], kMarker);
  EXPECT_TRUE(j["pre_tokenizer"].is_null());
  EXPECT_EQ(j["post_processor"]["single"][0]["SpecialToken"]["id"], "<s>");
  EXPECT_EQ(j["added_tokens"].size(), 3u);
}

}  // namespace
}  // namespace fp4::convert
