#include "chat/jinja_globals.h"

#include <locale.h>
#include <time.h>

#include "chat/jinja_error.h"

namespace fp4::chat::jinja {

namespace {

// Jinja's sandbox refuses larger ranges (MAX_RANGE).
constexpr int64_t kMaxRange = 100000;

Value range(CallArgs& args) {
  if (!args.keyword.empty()) eval_fail("range() takes no keyword arguments");
  const auto& a = args.positional;
  if (a.empty() || a.size() > 3) eval_fail("range expected 1 to 3 arguments, got {}", a.size());
  for (const Value& v : a) {
    if (!v.is_integral()) eval_fail("'{}' object cannot be interpreted as an integer", type_name(v));
  }
  const int64_t start = a.size() == 1 ? 0 : a[0].as_int();
  const int64_t stop = a.size() == 1 ? a[0].as_int() : a[1].as_int();
  const int64_t step = a.size() == 3 ? a[2].as_int() : 1;
  if (step == 0) eval_fail("range() arg 3 must not be zero");
  std::vector<Value> items;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (static_cast<int64_t>(items.size()) >= kMaxRange) {
      eval_fail("range too big, the sandbox blocks ranges larger than MAX_RANGE ({})", kMaxRange);
    }
    items.emplace_back(i);
  }
  return Value::list(std::move(items));
}

// dict(mapping_or_pairs, **kwargs), as namespace() and dict() take them.
DictData dict_from(CallArgs& args, std::string_view function) {
  DictData d;
  if (args.positional.size() > 1) eval_fail("{} expected at most 1 argument, got {}", function, args.positional.size());
  if (!args.positional.empty()) {
    const Value& init = args.positional[0];
    if (init.is_dict()) {
      d = init.as_dict();
    } else {
      for (const Value& pair : iterate(init)) {
        if (!pair.is_list() || pair.as_list().items.size() != 2 || !pair.as_list().items[0].is_string()) {
          eval_fail("{}: each item must be a (str, value) pair", function);
        }
        d.set(pair.as_list().items[0].as_string(), pair.as_list().items[1]);
      }
    }
  }
  for (auto& [k, v] : args.keyword) d.set(k, v);
  return d;
}

}  // namespace

DictData transformers_globals(std::chrono::system_clock::time_point now) {
  DictData g;
  g.set("range", Value::callable("range", range));
  g.set("dict", Value::callable("dict", [](CallArgs& args) { return Value::dict(dict_from(args, "dict")); }));
  g.set("namespace", Value::callable("namespace", [](CallArgs& args) {
          DictData d = dict_from(args, "namespace");
          for (const auto& entry : d.entries()) {
            if (!entry.first.empty() && entry.first[0] == '_') {
              eval_fail("Chat templates cannot store underscore-prefixed attributes on a namespace, but got '{}'",
                        entry.first);
            }
          }
          return Value::make_namespace(std::move(d));
        }));
  g.set("raise_exception", Value::callable("raise_exception", [](CallArgs& args) -> Value {
          BoundArgs b("raise_exception", args, {"message"});
          throw TemplateRaised(to_str(b.get_or(0, Value(""))));
        }));
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  g.set("strftime_now", Value::callable("strftime_now", [t](CallArgs& args) {
          BoundArgs b("strftime_now", args, {"format"});
          const std::string format = b.string_at(0);
          std::tm local{};
          localtime_r(&t, &local);
          // Python formats with the C locale's month and day names unless told otherwise.
          static const locale_t c_locale = newlocale(LC_ALL_MASK, "C", static_cast<locale_t>(0));
          std::string buf(format.size() * 8 + 64, '\0');
          const size_t n = strftime_l(buf.data(), buf.size(), format.c_str(), &local, c_locale);
          if (n == 0 && !format.empty()) eval_fail("strftime_now: cannot format '{}'", format);
          buf.resize(n);
          return Value(std::move(buf));
        }));
  return g;
}

}  // namespace fp4::chat::jinja
