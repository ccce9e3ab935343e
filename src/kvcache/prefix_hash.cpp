#include "kvcache/prefix_hash.h"

#include <bit>
#include <random>

namespace fp4::kvcache {
namespace {

struct SipState {
  uint64_t v0, v1, v2, v3;

  void round() {
    v0 += v1; v1 = std::rotl(v1, 13); v1 ^= v0; v0 = std::rotl(v0, 32);
    v2 += v3; v3 = std::rotl(v3, 16); v3 ^= v2;
    v0 += v3; v3 = std::rotl(v3, 21); v3 ^= v0;
    v2 += v1; v1 = std::rotl(v1, 17); v1 ^= v2; v2 = std::rotl(v2, 32);
  }
  void absorb(uint64_t m) {
    v3 ^= m;
    round();
    round();
    v0 ^= m;
  }
};

// Absorbs bytes one at a time so that hash_page needs no buffer (no allocation per page).
class SipHasher {
 public:
  explicit SipHasher(const PrefixHashKey& key)
      : s_{key.k0 ^ 0x736f6d6570736575ull, key.k1 ^ 0x646f72616e646f6dull,
           key.k0 ^ 0x6c7967656e657261ull, key.k1 ^ 0x7465646279746573ull} {}

  void update(uint8_t byte) {
    word_ |= static_cast<uint64_t>(byte) << (8 * (length_ % 8));
    if (++length_ % 8 == 0) {
      s_.absorb(word_);
      word_ = 0;
    }
  }

  uint64_t finish() {
    // The last word carries the message length in its top byte, so messages that differ
    // only by trailing zero bytes hash differently.
    s_.absorb(word_ | (static_cast<uint64_t>(length_ & 0xff) << 56));
    s_.v2 ^= 0xff;
    for (int r = 0; r < 4; ++r) s_.round();
    return s_.v0 ^ s_.v1 ^ s_.v2 ^ s_.v3;
  }

 private:
  SipState s_;
  uint64_t word_ = 0;
  uint64_t length_ = 0;
};

}  // namespace

PrefixHashKey random_prefix_hash_key() {
  std::random_device rd;
  auto word = [&] { return (static_cast<uint64_t>(rd()) << 32) ^ static_cast<uint64_t>(rd()); };
  return {word(), word()};
}

uint64_t siphash24(const PrefixHashKey& key, std::span<const std::byte> message) {
  SipHasher h(key);
  for (std::byte b : message) h.update(static_cast<uint8_t>(b));
  return h.finish();
}

PageHash hash_page(const PrefixHashKey& key, PageHash parent, std::span<const int32_t> tokens) {
  // Serialized byte by byte so the hash is the same on every host, whatever its endianness.
  SipHasher h(key);
  for (int b = 0; b < 8; ++b) h.update(static_cast<uint8_t>(parent >> (8 * b)));
  for (int32_t t : tokens) {
    const auto u = static_cast<uint32_t>(t);
    for (int b = 0; b < 4; ++b) h.update(static_cast<uint8_t>(u >> (8 * b)));
  }
  return h.finish();
}

}  // namespace fp4::kvcache
