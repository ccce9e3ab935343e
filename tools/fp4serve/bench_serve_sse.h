// An incremental parser of Server-Sent Events (the text/event-stream format of the WHATWG HTML
// standard, §9.2.6), fed with whatever bytes each read returns: an event or a line may be split
// across reads at any byte, one read may carry several events, and lines may end in LF, CRLF or
// CR (a CRLF split between two reads is one line ending, not two).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace fp4::bench_serve {

struct SseEvent {
  std::string event;  // the `event:` field; empty for the default "message" type
  std::string data;   // the `data:` lines joined with '\n'
};

class SseParser {
 public:
  // Parses `bytes` and appends every event they complete to `out`.
  void feed(std::string_view bytes, std::vector<SseEvent>& out);
  // Lines that began with ':' (keep-alive comments such as ": ping"), ignored as the standard says.
  int64_t comments() const { return comments_; }

 private:
  void end_line(std::vector<SseEvent>& out);

  std::string line_;
  bool after_cr_ = false;
  bool has_data_ = false;
  std::string data_;
  std::string event_;
  int64_t comments_ = 0;
};

}  // namespace fp4::bench_serve
