#include "kvcache/kv_cache_manager.h"

#include <algorithm>

#include "core/check.h"

namespace fp4::kvcache {

KvCacheManager::KvCacheManager(int32_t num_pages, const PrefixHashKey& key, int page_tokens)
    : pool_(num_pages, page_tokens), key_(key), page_tokens_(page_tokens) {}

std::vector<PageId> KvCacheManager::match(std::span<const int32_t> tokens, int64_t max_tokens,
                                          std::vector<PageHash>* hashes) const {
  std::vector<PageId> pages;
  PageHash parent = kRootPageHash;
  const int64_t full_pages = std::min<int64_t>(max_tokens, std::ssize(tokens)) / page_tokens_;
  for (int64_t i = 0; i < full_pages; ++i) {
    const auto page_tokens = tokens.subspan(i * page_tokens_, page_tokens_);
    const PageHash hash = hash_page(key_, parent, page_tokens);
    const std::optional<PageId> page = pool_.find_cached(hash, parent, page_tokens);
    // A miss ends the prefix: later pages' K/V depend on this one.
    if (!page) break;
    pages.push_back(*page);
    if (hashes) hashes->push_back(hash);
    parent = hash;
  }
  return pages;
}

std::vector<PageId> KvCacheManager::match_prefix(std::span<const int32_t> tokens) const {
  return match(tokens, std::ssize(tokens), nullptr);
}

int64_t KvCacheManager::cached_prefix_tokens(std::span<const int32_t> tokens) const {
  return static_cast<int64_t>(match_prefix(tokens).size()) * page_tokens_;
}

int64_t KvCacheManager::pages_needed(int64_t tokens) const {
  return pages_for_tokens(tokens, page_tokens_);
}

bool KvCacheManager::can_add_sequence(std::span<const int32_t> prompt) const {
  const std::vector<PageId> hits = match(prompt, std::ssize(prompt) - 1, nullptr);
  // An evictable hit leaves the free count when it is taken back, just as a new page does.
  int64_t taken = pages_needed(std::ssize(prompt)) - std::ssize(hits);
  for (PageId p : hits) taken += pool_.refcount(p) == 0;
  return taken <= pool_.num_free();
}

std::optional<int64_t> KvCacheManager::add_sequence(SeqId seq, std::span<const int32_t> prompt) {
  FP4_CHECK(!prompt.empty(), "KvCacheManager::add_sequence: sequence {} has an empty prompt", seq);
  FP4_CHECK(!seqs_.contains(seq), "KvCacheManager::add_sequence: sequence {} already exists", seq);
  if (!can_add_sequence(prompt)) return std::nullopt;

  Sequence s;
  s.table.pages = match(prompt, std::ssize(prompt) - 1, &s.hashes);
  // References first: taking new pages could otherwise evict an evictable hit.
  for (PageId p : s.table.pages) pool_.add_ref(p);
  const int64_t hit_tokens = std::ssize(s.table.pages) * page_tokens_;
  const int64_t total = pages_needed(std::ssize(prompt));
  // can_* guaranteed the pages; value() throws rather than run on with a garbage id.
  while (std::ssize(s.table.pages) < total) s.table.pages.push_back(pool_.allocate().value());
  s.tokens.assign(prompt.begin(), prompt.begin() + hit_tokens);
  seqs_.emplace(seq, std::move(s));

  ++stats_.requests;
  stats_.queries += std::ssize(prompt);
  stats_.hits += hit_tokens;
  return hit_tokens;
}

bool KvCacheManager::can_allocate(SeqId seq, int64_t n) const {
  FP4_CHECK(n >= 0, "KvCacheManager::can_allocate: n is {}, expected >= 0", n);
  const Sequence& s = get(seq);
  const int64_t missing = pages_needed(std::ssize(s.tokens) + n) - std::ssize(s.table.pages);
  return missing <= pool_.num_free();
}

bool KvCacheManager::allocate(SeqId seq, int64_t n) {
  if (!can_allocate(seq, n)) return false;
  Sequence& s = get(seq);
  const int64_t total = pages_needed(std::ssize(s.tokens) + n);
  // can_* guaranteed the pages; value() throws rather than run on with a garbage id.
  while (std::ssize(s.table.pages) < total) s.table.pages.push_back(pool_.allocate().value());
  return true;
}

void KvCacheManager::append(SeqId seq, std::span<const int32_t> tokens) {
  Sequence& s = get(seq);
  const int64_t capacity = std::ssize(s.table.pages) * page_tokens_;
  FP4_CHECK(std::ssize(s.tokens) + std::ssize(tokens) <= capacity,
            "KvCacheManager::append: sequence {} has {} tokens and room for {}, cannot append {}",
            seq, s.tokens.size(), capacity, tokens.size());
  s.tokens.insert(s.tokens.end(), tokens.begin(), tokens.end());
  const int64_t full_pages = std::ssize(s.tokens) / page_tokens_;
  for (int64_t i = std::ssize(s.hashes); i < full_pages; ++i) {
    const PageHash parent = i == 0 ? kRootPageHash : s.hashes[i - 1];
    const auto page_tokens = std::span(s.tokens).subspan(i * page_tokens_, page_tokens_);
    const PageHash hash = hash_page(key_, parent, page_tokens);
    s.hashes.push_back(hash);
    // When another sequence computed and cached the same page first, this copy stays private
    // and is freed with its sequence; the hash chain goes on either way, so later pages of
    // this sequence can still be cached.
    if (!pool_.find_cached(hash, parent, page_tokens)) {
      pool_.cache(s.table.pages[i], hash, parent, page_tokens);
    }
  }
}

void KvCacheManager::free(SeqId seq) {
  const auto it = seqs_.find(seq);
  FP4_CHECK(it != seqs_.end(), "KvCacheManager::free: no sequence {}", seq);
  const std::vector<PageId>& pages = it->second.table.pages;
  for (auto p = pages.rbegin(); p != pages.rend(); ++p) pool_.release(*p);
  seqs_.erase(it);
}

KvCacheManager::Sequence& KvCacheManager::get(SeqId seq) {
  const auto it = seqs_.find(seq);
  FP4_CHECK(it != seqs_.end(), "KvCacheManager: no sequence {}", seq);
  return it->second;
}

const KvCacheManager::Sequence& KvCacheManager::get(SeqId seq) const {
  const auto it = seqs_.find(seq);
  FP4_CHECK(it != seqs_.end(), "KvCacheManager: no sequence {}", seq);
  return it->second;
}

}  // namespace fp4::kvcache
