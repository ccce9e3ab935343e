#include "tools/fp4serve/bench_serve_sse.h"

namespace fp4::bench_serve {

void SseParser::feed(std::string_view bytes, std::vector<SseEvent>& out) {
  for (const char c : bytes) {
    if (after_cr_) {
      after_cr_ = false;
      if (c == '\n') continue;  // the LF of a CRLF whose CR already ended the line
    }
    if (c == '\r') {
      after_cr_ = true;
      end_line(out);
    } else if (c == '\n') {
      end_line(out);
    } else {
      line_.push_back(c);
    }
  }
}

void SseParser::end_line(std::vector<SseEvent>& out) {
  const std::string_view line = line_;
  if (line.empty()) {
    // A blank line dispatches the event being built; one without data lines is dropped.
    if (has_data_) out.push_back({std::move(event_), std::move(data_)});
    has_data_ = false;
    data_.clear();
    event_.clear();
  } else if (line.front() == ':') {
    ++comments_;
  } else {
    const size_t colon = line.find(':');
    const std::string_view field = line.substr(0, colon);
    std::string_view value;
    if (colon != std::string_view::npos) {
      value = line.substr(colon + 1);
      if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
    }
    if (field == "data") {
      if (has_data_) data_.push_back('\n');
      data_.append(value);
      has_data_ = true;
    } else if (field == "event") {
      event_.assign(value);
    }
    // `id` and `retry` concern reconnection, which a benchmark never does; other fields are
    // ignored by the standard.
  }
  line_.clear();
}

}  // namespace fp4::bench_serve
