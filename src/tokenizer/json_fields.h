// Reading the fields of tokenizer.json and tokenizer_config.json with errors that name the file
// and the field's path ("tokenizer.json: model.merges[12]: expected ...").
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/check.h"

namespace fp4::tokenizer::detail {

using Json = nlohmann::json;

struct JsonAt {
  std::string file;
  std::string path;  // empty at the top level

  JsonAt operator/(std::string_view key) const {
    return {file, path.empty() ? std::string(key) : fmt::format("{}.{}", path, key)};
  }
  JsonAt operator[](size_t index) const { return {file, fmt::format("{}[{}]", path, index)}; }
  std::string where() const { return path.empty() ? file : fmt::format("{}: {}", file, path); }
};

inline const Json& field(const Json& object, std::string_view key, const JsonAt& at) {
  FP4_CHECK(object.is_object(), "{}: expected an object", at.where());
  const auto it = object.find(key);
  FP4_CHECK(it != object.end(), "{}: missing field '{}'", at.where(), key);
  return *it;
}

inline bool has_value(const Json& object, std::string_view key) {
  const auto it = object.find(key);
  return it != object.end() && !it->is_null();
}

inline std::string string_field(const Json& object, std::string_view key, const JsonAt& at) {
  const Json& value = field(object, key, at);
  FP4_CHECK(value.is_string(), "{}: expected a string, found {}", (at / key).where(), value.dump());
  return value.get<std::string>();
}

inline std::string string_or(const Json& object, std::string_view key, std::string fallback,
                             const JsonAt& at) {
  return has_value(object, key) ? string_field(object, key, at) : fallback;
}

inline bool bool_or(const Json& object, std::string_view key, bool fallback, const JsonAt& at) {
  if (!has_value(object, key)) return fallback;
  const Json& value = object.at(key);
  FP4_CHECK(value.is_boolean(), "{}: expected true or false, found {}", (at / key).where(),
            value.dump());
  return value.get<bool>();
}

inline int64_t int_field(const Json& object, std::string_view key, const JsonAt& at) {
  const Json& value = field(object, key, at);
  FP4_CHECK(value.is_number_integer(), "{}: expected an integer, found {}", (at / key).where(),
            value.dump());
  return value.get<int64_t>();
}

// A token id: an integer in [0, 2^31).
inline int32_t id_value(const Json& value, const JsonAt& at) {
  FP4_CHECK(
      value.is_number_integer() && value.get<int64_t>() >= 0 && value.get<int64_t>() <= INT32_MAX,
      "{}: expected a token id (a non-negative 32-bit integer), found {}", at.where(),
      value.dump());
  return static_cast<int32_t>(value.get<int64_t>());
}

inline std::string type_field(const Json& object, const JsonAt& at) {
  return string_field(object, "type", at);
}

// A Replace or Split pattern: {"String": "..."} is supported, {"Regex": "..."} is handed back
// with is_regex set so that the caller can decide.
struct Pattern {
  std::string text;
  bool is_regex = false;
};
inline Pattern pattern_field(const Json& object, const JsonAt& at) {
  const Json& pattern = field(object, "pattern", at);
  const JsonAt pattern_at = at / "pattern";
  if (has_value(pattern, "String")) return {string_field(pattern, "String", pattern_at), false};
  if (has_value(pattern, "Regex")) return {string_field(pattern, "Regex", pattern_at), true};
  fail("{}: expected {{\"String\": ...}} or {{\"Regex\": ...}}, found {}", pattern_at.where(),
       pattern.dump());
}

}  // namespace fp4::tokenizer::detail
