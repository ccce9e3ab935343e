// Element formats of the two paged caches: the main K/V cache and the key-only index cache of
// MSA layers. Every format stores each token on its own (NVFP4 blocks run along one token's
// vector, never across tokens), so a page of 128 tokens is exactly 128 x the bytes of one token.
#pragma once

#include <cstdint>
#include <string_view>

namespace fp4::kvcache {

enum class CacheDType : uint8_t {
  kNone,   // nothing stored; only meaningful for the index cache in capacity what-ifs
  kBF16,
  kFP8,    // E4M3; its per-layer scalar scale is not per token and is not counted
  kNVFP4,  // E2M1 codes + one E4M3 scale per 16 values, no global scale per token
};

std::string_view cache_dtype_name(CacheDType dtype);

// Parses "bf16", "fp8" (or "fp8_e4m3"), "nvfp4" and, when allow_none, "none".
// Throws fp4::Error naming `flag` and the accepted spellings.
CacheDType parse_cache_dtype(std::string_view text, std::string_view flag, bool allow_none);

// Bytes that one token's vector of `elems` values occupies in a cache of this format.
// NVFP4 needs elems to be a multiple of its 16-value block (checked).
int64_t cache_vector_bytes(CacheDType dtype, int64_t elems);

}  // namespace fp4::kvcache
