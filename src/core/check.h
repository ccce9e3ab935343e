// Errors for host code: one exception type whose message says what was wrong and what was
// expected. Device code never throws; host launchers check their params before launching.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace fp4 {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Host compiler only: CUDA sources (.cu) return cudaError_t to a .cpp that formats the error.
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace fp4

// FP4_CHECK(cond, "format", args...) throws fp4::Error with the formatted message.
#define FP4_CHECK(cond, ...)           \
  do {                                 \
    if (!(cond)) ::fp4::fail(__VA_ARGS__); \
  } while (0)
