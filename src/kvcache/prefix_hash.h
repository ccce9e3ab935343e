// Page hashes for prefix caching.
//
// A full page's hash covers its whole prefix, not just its own tokens:
//   hash(page i) = SipHash-2-4_key(hash(page i-1) as 8 LE bytes || the page's token ids as 4 LE bytes each)
// with hash(page -1) = kRootPageHash. Two pages with the same tokens at different positions, or
// after different histories, get different hashes, so a hash lookup can stand for "the K/V of
// exactly this prefix": attention K/V depend on every earlier token, not just the page's own.
//
// SipHash-2-4 (Aumasson & Bernstein, "SipHash: a fast short-input PRF", 2012) is keyed: with a
// random key per process nobody can craft two prompts with equal hashes to read another
// request's cache, which an unkeyed 64-bit hash (FNV, std::hash) would allow. Accidental
// collisions remain possible at 2^-64 per pair; the block pool also compares the stored tokens
// and parent hash of a candidate page, so only a collision of a whole earlier prefix could ever
// give a wrong hit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace fp4::kvcache {

using PageHash = uint64_t;

// The parent hash of a sequence's first page.
constexpr PageHash kRootPageHash = 0;

// SipHash's 128-bit key as two little-endian words (key bytes 0-7 and 8-15).
struct PrefixHashKey {
  uint64_t k0 = 0;
  uint64_t k1 = 0;
};

// A fresh key from std::random_device: what an engine should use.
PrefixHashKey random_prefix_hash_key();

uint64_t siphash24(const PrefixHashKey& key, std::span<const std::byte> message);

PageHash hash_page(const PrefixHashKey& key, PageHash parent, std::span<const int32_t> tokens);

}  // namespace fp4::kvcache
