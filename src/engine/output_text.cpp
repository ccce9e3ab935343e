#include "engine/output_text.h"

#include <algorithm>

#include "core/check.h"

namespace fp4::engine {

OutputText::OutputText(std::vector<std::string> stop, bool include_stop_str_in_output)
    : stop_(std::move(stop)), include_stop_(include_stop_str_in_output) {
  for (const std::string& s : stop_) {
    FP4_CHECK(!s.empty(), "stop strings must not be empty");
    hold_ = std::max(hold_, s.size() - 1);
  }
}

std::optional<std::string> OutputText::add(std::string_view piece, bool check_stops) {
  FP4_CHECK(!stopped_, "OutputText::add after a stop string");
  const size_t old_size = text_.size();
  text_.append(piece);
  if (!check_stops) return std::nullopt;
  // A match must end inside the new piece; it may start up to hold_ bytes before it.
  const size_t from = old_size > hold_ ? old_size - hold_ : 0;
  size_t best = std::string::npos;
  const std::string* which = nullptr;
  for (const std::string& s : stop_) {
    const size_t at = text_.find(s, from);
    if (at != std::string::npos && at < best) {
      best = at;
      which = &s;
    }
  }
  if (which == nullptr) return std::nullopt;
  stopped_ = true;
  text_.resize(include_stop_ ? best + which->size() : best);
  shown_ = std::min(shown_, text_.size());
  return *which;
}

std::string OutputText::take(bool final) {
  size_t end = text_.size();
  if (!final && !stopped_) {
    end = end > hold_ ? end - hold_ : 0;
    // Never split a UTF-8 character: back up over continuation bytes.
    while (end > shown_ && end < text_.size() &&
           (static_cast<unsigned char>(text_[end]) & 0xC0) == 0x80) {
      --end;
    }
  }
  if (end <= shown_) return {};
  std::string out = text_.substr(shown_, end - shown_);
  shown_ = end;
  return out;
}

}  // namespace fp4::engine
