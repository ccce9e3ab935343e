#include "kvcache/cache_dtype.h"

#include "core/check.h"
#include "formats/nvfp4.h"

namespace fp4::kvcache {

std::string_view cache_dtype_name(CacheDType dtype) {
  switch (dtype) {
    case CacheDType::kNone: return "none";
    case CacheDType::kBF16: return "bf16";
    case CacheDType::kFP8: return "fp8";
    case CacheDType::kNVFP4: return "nvfp4";
  }
  return "?";
}

CacheDType parse_cache_dtype(std::string_view text, std::string_view flag, bool allow_none) {
  if (text == "bf16") return CacheDType::kBF16;
  if (text == "fp8" || text == "fp8_e4m3") return CacheDType::kFP8;
  if (text == "nvfp4") return CacheDType::kNVFP4;
  if (allow_none && text == "none") return CacheDType::kNone;
  fail("{} '{}' is not a cache format; expected one of bf16, fp8, nvfp4{}", flag, text,
       allow_none ? ", none" : "");
}

int64_t cache_vector_bytes(CacheDType dtype, int64_t elems) {
  FP4_CHECK(elems >= 0, "a cache vector cannot have {} elements", elems);
  switch (dtype) {
    case CacheDType::kNone: return 0;
    case CacheDType::kBF16: return 2 * elems;
    case CacheDType::kFP8: return elems;
    case CacheDType::kNVFP4:
      FP4_CHECK(elems % kNvfp4BlockElems == 0,
                "an NVFP4 cache vector needs a multiple of {} values, got {}", kNvfp4BlockElems,
                elems);
      return nvfp4_code_bytes(1, elems) + nvfp4_scale_bytes(1, elems);
  }
  return 0;
}

}  // namespace fp4::kvcache
