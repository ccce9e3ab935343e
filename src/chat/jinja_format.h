// Python's printf-style string formatting: `'%s: %d' % (name, n)` and Jinja's format filter.
#pragma once

#include <string>

#include "chat/jinja_value.h"

namespace fp4::chat::jinja {

// format % args, with Python's rules for args: a tuple supplies one value per conversion; a
// dict (or anything else indexable) may be looked up by %(name)s and may go unused; any other
// value is the single argument. Conversions s r a d i u f F e E g G x X o c and %%, with
// flags, width and precision (also given as *).
std::string percent_format(const std::string& format, const Value& args);

}  // namespace fp4::chat::jinja
