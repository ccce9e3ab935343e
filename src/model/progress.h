// A one-line progress bar for long loads: bytes done, total, percent and throughput, redrawn in
// place with '\r' and ended with a newline. Only worth drawing on a terminal and for loads that
// take a while, so the default shows it for totals of 256 MiB or more on a terminal.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <string_view>

namespace fp4::model {

enum class ProgressMode {
  kAuto,    // on a terminal, for totals >= kProgressMinBytes
  kAlways,  // whatever the stream and the total (tests, scripts that want a log line)
  kNever,
};

constexpr int64_t kProgressMinBytes = int64_t{256} << 20;

// Whether a bar of `total_bytes` should be drawn on `stream` under `mode`.
bool progress_enabled(ProgressMode mode, int64_t total_bytes, std::FILE* stream);

// The text of one redraw (without '\r'): "<label>: 1.23 / 4.56 GB  27%  812 MB/s". Sizes are
// decimal (MB = 10^6 bytes), like the MB/s beside them.
std::string progress_line(std::string_view label, int64_t done_bytes, int64_t total_bytes,
                          double seconds);

class ProgressBar {
 public:
  ProgressBar(std::string label, int64_t total_bytes, std::FILE* stream);
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // Thread-safe. Redraws at most every 100 ms, so many small tensors do not flood the terminal;
  // reaching the total draws the final line and the newline.
  void advance(int64_t bytes);
  // Draws the final line and the newline once, if anything was drawn (or the total reached).
  void finish();

 private:
  void draw(bool final_line);

  using Clock = std::chrono::steady_clock;
  std::string label_;
  int64_t total_ = 0;
  std::FILE* stream_ = nullptr;
  std::mutex mutex_;
  int64_t done_ = 0;
  bool drawn_ = false;
  bool finished_ = false;
  Clock::time_point start_;
  Clock::time_point last_draw_;
};

}  // namespace fp4::model
