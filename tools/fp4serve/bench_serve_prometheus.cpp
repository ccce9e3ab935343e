#include "tools/fp4serve/bench_serve_prometheus.h"

#include <algorithm>
#include <cstdlib>
#include <string>

namespace fp4::bench_serve {
namespace {

// Position just past the '}' that closes a label set starting at `open`, honouring quoted label
// values with backslash escapes; npos when it is not closed on this line.
size_t skip_labels(std::string_view line, size_t open) {
  bool quoted = false;
  for (size_t i = open + 1; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '\\') ++i;
      else if (c == '"') quoted = false;
    } else if (c == '"') {
      quoted = true;
    } else if (c == '}') {
      return i + 1;
    }
  }
  return std::string_view::npos;
}

bool parse_value(std::string_view text, double& value) {
  const std::string s(text);  // strtod needs a terminated string; it also reads +Inf and NaN
  char* end = nullptr;
  value = std::strtod(s.c_str(), &end);
  return end != s.c_str() && *end == '\0';
}

}  // namespace

std::map<std::string, double> read_counters(std::string_view exposition,
                                            const std::vector<std::string>& names) {
  std::map<std::string, double> sums;
  while (!exposition.empty()) {
    const size_t eol = exposition.find('\n');
    std::string_view line = exposition.substr(0, eol);
    exposition = eol == std::string_view::npos ? std::string_view{} : exposition.substr(eol + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || line.front() == '#') continue;
    const size_t name_end = line.find_first_of("{ \t");
    if (name_end == std::string_view::npos) continue;
    const std::string_view name = line.substr(0, name_end);
    if (std::find(names.begin(), names.end(), name) == names.end()) continue;
    size_t pos = name_end;
    if (line[pos] == '{') {
      pos = skip_labels(line, pos);
      if (pos == std::string_view::npos) continue;
    }
    pos = line.find_first_not_of(" \t", pos);
    if (pos == std::string_view::npos) continue;
    // The value, then an optional timestamp.
    const size_t value_end = line.find_first_of(" \t", pos);
    double value = 0;
    if (!parse_value(line.substr(pos, value_end - pos), value)) continue;
    sums[std::string(name)] += value;
  }
  return sums;
}

std::map<std::string, double> counter_deltas(const std::map<std::string, double>& before,
                                             const std::map<std::string, double>& after) {
  std::map<std::string, double> out;
  for (const auto& [name, value] : after) {
    if (auto it = before.find(name); it != before.end()) out[name] = value - it->second;
  }
  return out;
}

}  // namespace fp4::bench_serve
