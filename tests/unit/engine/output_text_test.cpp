// Stop strings in streamed text: what is shown, what is held back, where the text ends.
#include <gtest/gtest.h>

#include "engine/output_text.h"

namespace fp4::engine {
namespace {

// Feeds `pieces` one by one and returns what a client sees after each, and the stop found.
std::pair<std::vector<std::string>, std::optional<std::string>> stream(
    OutputText& t, const std::vector<std::string>& pieces) {
  std::vector<std::string> shown;
  std::optional<std::string> stop;
  for (const std::string& p : pieces) {
    stop = t.add(p);
    shown.push_back(t.take(stop.has_value()));
    if (stop) break;
  }
  return {shown, stop};
}

TEST(OutputText, HoldsBackWhatCouldBeginAStopString) {
  OutputText t({"END"}, false);
  const auto [shown, stop] = stream(t, {"ab", "cE", "N", "x", "yEN", "D", "zz"});
  // The last 2 bytes (the longest stop string minus one) are always held back: "abcE" shows
  // "ab", "abcEN" shows "c", ... "abcENxyEN" shows up to "xy". "D" completes "END" at offset 7,
  // so the text ends "abcENxy" and nothing held back is shown.
  EXPECT_EQ(shown, (std::vector<std::string>{"", "ab", "c", "E", "Nxy", ""}));
  EXPECT_EQ(stop, "END");
  EXPECT_EQ(t.text(), "abcENxy");
}

TEST(OutputText, IncludeStopStringAndEarliestMatchWins) {
  // "abcd" starts before "bc" in "xabcd", so it is the stop string whatever the list order.
  OutputText t({"bc", "abcd"}, true);
  const auto [shown, stop] = stream(t, {"xab", "cd"});
  EXPECT_EQ(stop, "abcd");
  EXPECT_EQ(t.text(), "xabcd");
  std::string all;
  for (const auto& s : shown) all += s;
  EXPECT_EQ(all, "xabcd");
}

TEST(OutputText, NoStopStringsShowsEverythingAtOnce) {
  OutputText t({}, false);
  EXPECT_FALSE(t.add("héllo").has_value());
  EXPECT_EQ(t.take(false), "héllo");
  EXPECT_EQ(t.take(true), "");
}

TEST(OutputText, NeverSplitsAUtf8Character) {
  OutputText t({"ZZZ"}, false);
  t.add("\xC3\xA9a");  // "éa": holding 2 bytes would cut é in half, so all of it is held
  EXPECT_EQ(t.take(false), "");
  t.add("bc");
  EXPECT_EQ(t.take(false), "\xC3\xA9a");
  EXPECT_EQ(t.take(true), "bc");
}

TEST(OutputText, StopsAreNotLookedForBeforeMinTokens) {
  OutputText t({"x"}, false);
  EXPECT_FALSE(t.add("axb", /*check_stops=*/false).has_value());
  EXPECT_EQ(t.add("cxd").value(), "x");
  EXPECT_EQ(t.take(true), "axbc");
}

}  // namespace
}  // namespace fp4::engine
