// A request's output text as it streams: detokenized pieces go in, and what may be shown comes
// out. With stop strings, the tail that could still turn out to begin one is held back, so a
// client never sees text that a later token turns into a stop string; when one appears the text
// ends just before it (or just after, when the request asks to include it).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fp4::engine {

class OutputText {
 public:
  OutputText(std::vector<std::string> stop, bool include_stop_str_in_output);

  // Adds decoded text. With check_stops, returns the stop string when this text completed one
  // (the earliest in the text); the text is then final and nothing more may be added. Without
  // (before min_tokens), stop strings are not looked for.
  std::optional<std::string> add(std::string_view piece, bool check_stops = true);
  // The text that may be shown and was not taken before. `final`: the request ended, release
  // everything kept back.
  std::string take(bool final);

  const std::string& text() const { return text_; }

 private:
  std::vector<std::string> stop_;
  bool include_stop_;
  size_t hold_ = 0;  // longest stop string minus one byte
  std::string text_;
  size_t shown_ = 0;
  bool stopped_ = false;
};

}  // namespace fp4::engine
