// Jinja's built-in filters (`x | trim`) and tests (`x is defined`), with transformers' tojson.
// The parser checks the names (check_filter_name, check_test_name) where Jinja's compiler does,
// so a misspelt filter fails when the template is loaded rather than on some later request.
#pragma once

#include <string>
#include <string_view>

#include "chat/jinja_value.h"

namespace fp4::chat::jinja {

// Empty when `name` is a filter we implement; otherwise the error message for it.
std::string check_filter_name(std::string_view name);
std::string check_test_name(std::string_view name);

Value apply_filter(const std::string& name, const Value& subject, CallArgs& args);
bool apply_test(const std::string& name, const Value& subject, CallArgs& args);

// Jinja's attribute path lookup used by map/selectattr/sort/join(attribute=...): "a.b.0" reads
// item a, then b, then index 0, with get_item's fallbacks.
Value lookup_path(const Value& item, const Value& path);

}  // namespace fp4::chat::jinja
