// JSON in and out of template values. Input keeps the documents' key order (ordered_json), as
// Python's json.loads does. Output is Python's json.dumps, byte for byte, since transformers'
// tojson filter is json.dumps(x, ensure_ascii=False, indent=None, separators=None,
// sort_keys=False).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "chat/jinja_value.h"

namespace fp4::chat::jinja {

Value from_json(const nlohmann::ordered_json& j);

struct JsonDumpOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;  // absent: one line; "" puts each item on its own line
  std::optional<std::string> item_separator;  // default ", " (one line) or "," (indented)
  std::string key_separator = ": ";
  bool sort_keys = false;
};

// An EvalError for values JSON cannot hold (Undefined, namespaces, functions).
std::string dump_json(const Value& v, const JsonDumpOptions& options);

}  // namespace fp4::chat::jinja
