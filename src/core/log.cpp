#include "core/log.h"

#include <atomic>
#include <mutex>

namespace fp4 {
namespace {
std::atomic<LogLevel> g_level{LogLevel::kInfo};
std::mutex g_mutex;
constexpr const char* kNames[] = {"debug", "info", "warn", "error"};
}  // namespace

void set_log_level(LogLevel level) { g_level = level; }
LogLevel log_level() { return g_level; }

void log_line(LogLevel level, const std::string& message) {
  std::lock_guard<std::mutex> lock(g_mutex);
  fmt::print(stderr, "[fp4serve {}] {}\n", kNames[static_cast<int>(level)], message);
}

}  // namespace fp4
