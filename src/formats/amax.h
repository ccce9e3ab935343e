// Block absolute maximum, the input of every block-scale rule. Max is exact and order-free, so
// a block reduced across threads (shuffles) gets the same amax as a sequential loop. NaN does
// not enter the max; it is flagged, and the scale rules turn it into a NaN scale.
#pragma once

#include "formats/hd.h"

namespace fp4 {

FP4_HD void accumulate_amax(float x, float& amax, bool& has_nan) {
  const float a = bits_to_float(float_to_bits(x) & 0x7FFFFFFFu);
  has_nan |= is_nan(a);
  amax = a > amax ? a : amax;  // compiles to one max instruction; NaN never enters
}

}  // namespace fp4
