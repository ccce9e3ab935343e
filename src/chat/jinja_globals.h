// The functions transformers' chat template environment provides: Jinja's range, dict and
// namespace, and transformers' raise_exception and strftime_now.
#pragma once

#include <chrono>

#include "chat/jinja_value.h"

namespace fp4::chat::jinja {

// `now` is what strftime_now formats, in the machine's local time zone as Python's
// datetime.now() is.
DictData transformers_globals(std::chrono::system_clock::time_point now);

}  // namespace fp4::chat::jinja
