#include "model/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>

namespace fp4::model {

bool progress_enabled(ProgressMode mode, int64_t total_bytes, std::FILE* stream) {
  switch (mode) {
    case ProgressMode::kAlways: return stream != nullptr;
    case ProgressMode::kNever: return false;
    case ProgressMode::kAuto: break;
  }
  return stream != nullptr && total_bytes >= kProgressMinBytes && isatty(fileno(stream)) == 1;
}

std::string progress_line(std::string_view label, int64_t done_bytes, int64_t total_bytes,
                          double seconds) {
  const double done = static_cast<double>(done_bytes), total = static_cast<double>(total_bytes);
  const double percent = total_bytes > 0 ? 100.0 * done / total : 100.0;
  const double rate = seconds > 0.0 ? done / 1e6 / seconds : 0.0;
  // GB once the total is large enough that MB would be a wall of digits.
  const bool gb = total_bytes >= 10'000'000'000;
  const double unit = gb ? 1e9 : 1e6;
  std::string line = fmt::format("{}: {:.{}f} / {:.{}f} {}  {:3.0f}%  {:.0f} MB/s", label,
                                 done / unit, gb ? 2 : 1, total / unit, gb ? 2 : 1,
                                 gb ? "GB" : "MB", percent, rate);
  // Time left at the rate so far; shown once there is a rate to extrapolate from.
  if (rate > 0.0 && done < total) {
    const int64_t eta = static_cast<int64_t>((total - done) / 1e6 / rate + 0.5);
    line += fmt::format("  ETA {}:{:02d}", eta / 60, eta % 60);
  }
  return line;
}

ProgressBar::ProgressBar(std::string label, int64_t total_bytes, std::FILE* stream)
    : label_(std::move(label)), total_(total_bytes), stream_(stream), start_(Clock::now()),
      last_draw_(start_) {}

ProgressBar::~ProgressBar() { finish(); }

void ProgressBar::advance(int64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (finished_) return;
  // Loading a tensor twice must not push the bar past its total.
  done_ = std::min(total_, done_ + std::max<int64_t>(bytes, 0));
  if (done_ >= total_) {
    draw(true);
    return;
  }
  const auto now = Clock::now();
  if (!drawn_ || now - last_draw_ >= std::chrono::milliseconds(100)) {
    last_draw_ = now;
    draw(false);
  }
}

void ProgressBar::finish() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!finished_ && drawn_) draw(true);
}

void ProgressBar::draw(bool final_line) {
  const double seconds = std::chrono::duration<double>(Clock::now() - start_).count();
  // Trailing spaces wipe what a longer previous line left behind.
  const std::string line = progress_line(label_, done_, total_, seconds);
  std::fprintf(stream_, "\r%s   %s", line.c_str(), final_line ? "\n" : "");
  std::fflush(stream_);
  drawn_ = true;
  finished_ = final_line;
}

}  // namespace fp4::model
