// Integer helpers for sizes and counts, shared by every layer so they round the same way.
#pragma once

#include <cstdint>

namespace fp4 {

// ceil(a / b) for a >= 0 and b > 0: whole pages, blocks or experts when a partial one still
// takes a whole one.
constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace fp4
