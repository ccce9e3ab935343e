// The two ways rendering a chat template fails.
#pragma once

#include <string>

#include "core/check.h"

namespace fp4::chat::jinja {

// A template that cannot be parsed or evaluated: an unknown filter, an undefined value used as
// an object, a type error. The renderer prefixes "chat template line L:C: " where it happened.
class EvalError : public fp4::Error {
 public:
  explicit EvalError(const std::string& what, bool positioned = false)
      : fp4::Error(what), positioned_(positioned) {}
  bool positioned() const { return positioned_; }

 private:
  bool positioned_;
};

// raise_exception('...') called by the template: the message is the template's own, verbatim,
// because it is meant for the client (the server answers 400 with it).
class TemplateRaised : public fp4::Error {
 public:
  explicit TemplateRaised(const std::string& what) : fp4::Error(what) {}
};

template <typename... Args>
[[noreturn]] void eval_fail(fmt::format_string<Args...> format, Args&&... args) {
  throw EvalError(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace fp4::chat::jinja
