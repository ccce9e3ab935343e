// The methods of Python's str, dict and list that chat templates call (message.content.strip(),
// tools.items(), x.get('k', d) ...). Methods that would mutate a list or dict do not exist here,
// as in Jinja's immutable sandbox.
#pragma once

#include <string>
#include <string_view>

#include "chat/jinja_value.h"

namespace fp4::chat::jinja {

bool has_method(const Value& self, std::string_view name);
// A callable bound to `self`; `name` must satisfy has_method.
Value bind_method(const Value& self, const std::string& name);

}  // namespace fp4::chat::jinja
