// Parsing a JSON document that must be an object, with errors that name its source: shared by
// the config.json parser and the preset files.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/check.h"

namespace fp4::model {

inline nlohmann::json parse_json_object(const std::string& json_text, const std::string& source) {
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not valid JSON ({})", source, e.what());
  }
  FP4_CHECK(root.is_object(), "{}: expected a JSON object at the top level", source);
  return root;
}

}  // namespace fp4::model
