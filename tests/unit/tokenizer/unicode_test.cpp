// UTF-8 scanning and repair, and the Unicode classes behind the pre-tokenization regex.
#include "tokenizer/unicode.h"

#include <gtest/gtest.h>

#include <string>

#include "tests/support/random.h"

namespace fp4::tokenizer {
namespace {

std::string fffd(int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += kReplacementChar;
  return out;
}

TEST(Utf8Lossy, ReplacesEachMaximalSubpartOnce) {
  // The example of Unicode §3.9 (table 3-8): F1 80 80 and E1 80 are each one truncated
  // sequence, C2 is cut short by 'b', and the lone 80 and BF are one replacement each.
  EXPECT_EQ(utf8_lossy("\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64"),
            "a" + fffd(3) + "b" + fffd(1) + "c" + fffd(2) + "d");
  EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), fffd(3));      // a surrogate: ED admits only 80..9F next
  EXPECT_EQ(utf8_lossy("\xC0\xAF"), fffd(2));          // overlong: C0 never starts a sequence
  EXPECT_EQ(utf8_lossy("\xE0\x80\xAF"), fffd(3));      // overlong: E0 admits only A0..BF next
  EXPECT_EQ(utf8_lossy("\xF4\x90\x80\x80"), fffd(4));  // past U+10FFFF
  EXPECT_EQ(utf8_lossy("\xF0\x9F\x98"), fffd(1));      // truncated at the end: one replacement
  EXPECT_EQ(utf8_lossy("caf\xC3\xA9 \xF0\x9F\x98\x80"), "caf\xC3\xA9 \xF0\x9F\x98\x80");
}

TEST(Utf8Lossy, IncompleteTailIsWhatMoreBytesCouldComplete) {
  EXPECT_EQ(incomplete_utf8_tail(""), 0u);
  EXPECT_EQ(incomplete_utf8_tail("a\xC3"), 1u);
  EXPECT_EQ(incomplete_utf8_tail("a\xE4\xBD"), 2u);
  EXPECT_EQ(incomplete_utf8_tail("\xF0\x9F\x98"), 3u);
  EXPECT_EQ(incomplete_utf8_tail("\xE4\xBD\xA0"), 0u);      // complete
  EXPECT_EQ(incomplete_utf8_tail("\xF0\x9F\x98\x80"), 0u);  // complete
  EXPECT_EQ(incomplete_utf8_tail("\xE4\x41"), 0u);          // already broken by 'A'
  EXPECT_EQ(incomplete_utf8_tail("\xBD"), 0u);              // a stray continuation byte
  EXPECT_EQ(incomplete_utf8_tail("\xE0\x80"), 0u);          // E0 80 can never be completed
}

TEST(Utf8, RandomCodePointsRoundTrip) {
  auto rng = fp4::testing::seeded_rng();
  std::uniform_int_distribution<uint32_t> cp_dist(0, 0x10FFFF);
  for (int trial = 0; trial < 2000; ++trial) {
    std::u32string cps;
    std::string text;
    for (int i = 0; i < 20; ++i) {
      char32_t cp = cp_dist(rng);
      if (cp >= 0xD800 && cp <= 0xDFFF) cp -= 0x800;  // surrogates are not characters
      cps.push_back(cp);
      append_utf8(text, cp);
    }
    ASSERT_EQ(find_invalid_utf8(text), std::string::npos);
    ASSERT_EQ(utf8_lossy(text), text);
    std::u32string back;
    for (size_t pos = 0; pos < text.size();) back.push_back(next_char(text, pos));
    ASSERT_EQ(back, cps);
  }
}

// The streaming decoder relies on this: cutting bytes where no sequence is left open does not
// change their repair.
TEST(Utf8Lossy, SplitsWhereNothingIsOpenDoNotChangeTheRepair) {
  auto rng = fp4::testing::seeded_rng(1);
  // Bytes drawn mostly from lead and continuation bytes, so that every case of table 3-7 shows up.
  const std::string alphabet =
      "a\x80\xBF\xA0\x9F\x90\x8F\xC2\xDF\xE0\xE1\xED\xEF\xF0\xF1\xF4\xF5\xC0";
  std::uniform_int_distribution<size_t> pick(0, alphabet.size() - 1), len(0, 12);
  int splits = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    std::string a, b;
    for (size_t i = len(rng); i > 0; --i) a.push_back(alphabet[pick(rng)]);
    for (size_t i = len(rng); i > 0; --i) b.push_back(alphabet[pick(rng)]);
    const std::string whole = utf8_lossy(a + b);
    ASSERT_EQ(find_invalid_utf8(whole), std::string::npos);
    if (incomplete_utf8_tail(a) > 0) continue;
    ++splits;
    ASSERT_EQ(utf8_lossy(a) + utf8_lossy(b), whole)
        << "a=" << ::testing::PrintToString(a) << " b=" << ::testing::PrintToString(b);
  }
  EXPECT_GT(splits, 1000);  // the property was exercised, not skipped
}

TEST(UnicodeClasses, MatchTheRegexClasses) {
  EXPECT_TRUE(is_letter('a') && is_letter(U'\u00E9') && is_letter(U'\u4E2D') &&
              is_letter(U'\u01C5'));
  EXPECT_FALSE(is_letter('1') || is_letter('_') || is_letter(U'\u0301'));
  EXPECT_TRUE(is_number('7') && is_number(U'\u0663') && is_number(U'\u2162') &&
              is_number(U'\u00BD'));
  EXPECT_FALSE(is_number('a') || is_number('.') || is_number(U'\u00B7'));
  // \s is the White_Space property: NEL and the ideographic space are in it; the information
  // separators 1C..1F (which Python's isspace accepts) and the zero-width space are not.
  EXPECT_TRUE(is_whitespace(' ') && is_whitespace('\t') && is_whitespace(U'\u0085') &&
              is_whitespace(U'\u3000'));
  EXPECT_FALSE(is_whitespace(U'\u001C') || is_whitespace(U'\u200B') || is_whitespace('x'));
  EXPECT_TRUE(is_word_char('_') && is_word_char(U'\u0301') && is_word_char(U'\u24B6') &&
              is_word_char('9'));
  EXPECT_FALSE(is_word_char('-') || is_word_char(' ') || is_word_char(U'\u00BD'));
}

}  // namespace
}  // namespace fp4::tokenizer
