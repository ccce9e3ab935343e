// Renders template text with transformers' globals and given variables, for the Jinja tests.
#pragma once

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "chat/jinja_globals.h"
#include "core/check.h"
#include "chat/jinja_json.h"
#include "chat/jinja_parser.h"
#include "chat/jinja_render.h"

namespace fp4::chat::jinja::test_util {

// 2024-06-10 (any fixed time: strftime_now must not depend on when the tests run).
inline constexpr std::time_t kNow = 1718000000;

inline std::string render(std::string_view source,
                          const nlohmann::ordered_json& vars = nlohmann::ordered_json::object()) {
  const Template t = parse_template(source);
  DictData globals = transformers_globals(std::chrono::system_clock::from_time_t(kNow));
  for (const auto& [name, value] : vars.items()) globals.set(name, from_json(value));
  return jinja::render(t, globals);
}

// The message of the fp4::Error that parsing or rendering throws, or "<no error>".
inline std::string error_of(std::string_view source,
                            const nlohmann::ordered_json& vars = nlohmann::ordered_json::object()) {
  try {
    render(source, vars);
  } catch (const fp4::Error& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace fp4::chat::jinja::test_util
