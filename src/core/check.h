// Errors for host code. fp4::Error is bad input (a flag, a file, a shape): its message names the
// field, what was found and what was expected. fp4::InternalError is a failure of the machine or
// of fp4serve itself (a CUDA error, a kernel that disagrees with its reference). Device code
// never throws; host launchers check their params before launching.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace fp4 {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

class InternalError : public std::runtime_error {
 public:
  explicit InternalError(const std::string& what) : std::runtime_error(what) {}
};

// Host compiler only: CUDA sources (.cu) return cudaError_t to a .cpp that formats the error.
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

template <typename... Args>
[[noreturn]] void fail_internal(fmt::format_string<Args...> format, Args&&... args) {
  throw InternalError(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace fp4

// FP4_CHECK(cond, "format", args...) throws fp4::Error with the formatted message.
#define FP4_CHECK(cond, ...)           \
  do {                                 \
    if (!(cond)) ::fp4::fail(__VA_ARGS__); \
  } while (0)
