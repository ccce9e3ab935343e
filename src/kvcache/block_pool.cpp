#include "kvcache/block_pool.h"

#include <algorithm>

#include "core/check.h"

namespace fp4::kvcache {

BlockPool::BlockPool(int32_t num_pages, int page_tokens) : page_tokens_(page_tokens) {
  FP4_CHECK(num_pages >= 0, "BlockPool: num_pages is {}, expected >= 0", num_pages);
  FP4_CHECK(page_tokens > 0, "BlockPool: page_tokens is {}, expected > 0", page_tokens);
  refcount_.assign(num_pages, 0);
  lru_prev_.assign(num_pages, kNoPage);
  lru_next_.assign(num_pages, kNoPage);
  cached_.assign(num_pages, 0);
  hash_.assign(num_pages, 0);
  parent_.assign(num_pages, 0);
  tokens_.assign(static_cast<size_t>(num_pages) * page_tokens, 0);
  by_hash_.reserve(num_pages);
  // Reversed so that a fresh pool hands out page 0 first, which makes logs easy to read.
  free_.reserve(num_pages);
  for (PageId p = num_pages - 1; p >= 0; --p) free_.push_back(p);
}

void BlockPool::check_id(PageId page, const char* what) const {
  FP4_CHECK(page >= 0 && page < num_pages(), "BlockPool::{}: page id {} out of range [0, {})",
            what, page, num_pages());
}

std::optional<PageId> BlockPool::allocate() {
  PageId page = kNoPage;
  if (!free_.empty()) {
    page = free_.back();
    free_.pop_back();
  } else if (lru_head_ != kNoPage) {
    page = lru_head_;
    lru_unlink(page);
    by_hash_.erase(hash_[page]);
    cached_[page] = 0;
  } else {
    return std::nullopt;
  }
  refcount_[page] = 1;
  return page;
}

void BlockPool::add_ref(PageId page) {
  check_id(page, "add_ref");
  if (refcount_[page] == 0) {
    FP4_CHECK(cached_[page], "BlockPool::add_ref: page {} is free (refcount 0, not cached)", page);
    lru_unlink(page);
  }
  ++refcount_[page];
}

void BlockPool::release(PageId page) {
  check_id(page, "release");
  FP4_CHECK(refcount_[page] > 0, "BlockPool::release: page {} is not in use (refcount 0)", page);
  if (--refcount_[page] > 0) return;
  if (cached_[page]) {
    lru_push_back(page);
  } else {
    free_.push_back(page);
  }
}

std::optional<PageId> BlockPool::find_cached(PageHash hash, PageHash parent,
                                             std::span<const int32_t> tokens) const {
  const auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return std::nullopt;
  const PageId page = it->second;
  const auto stored = std::span(tokens_).subspan(static_cast<size_t>(page) * page_tokens_, page_tokens_);
  if (parent_[page] != parent || !std::ranges::equal(stored, tokens)) return std::nullopt;
  return page;
}

bool BlockPool::cache(PageId page, PageHash hash, PageHash parent, std::span<const int32_t> tokens) {
  check_id(page, "cache");
  FP4_CHECK(refcount_[page] > 0, "BlockPool::cache: page {} is not in use", page);
  FP4_CHECK(!cached_[page], "BlockPool::cache: page {} is already cached", page);
  FP4_CHECK(tokens.size() == static_cast<size_t>(page_tokens_),
            "BlockPool::cache: {} tokens, expected a full page of {}", tokens.size(), page_tokens_);
  if (!by_hash_.try_emplace(hash, page).second) return false;
  cached_[page] = 1;
  hash_[page] = hash;
  parent_[page] = parent;
  std::ranges::copy(tokens, tokens_.begin() + static_cast<ptrdiff_t>(page) * page_tokens_);
  return true;
}

int32_t BlockPool::refcount(PageId page) const {
  check_id(page, "refcount");
  return refcount_[page];
}

bool BlockPool::is_cached(PageId page) const {
  check_id(page, "is_cached");
  return cached_[page] != 0;
}

std::vector<PageId> BlockPool::evictable_pages() const {
  std::vector<PageId> out;
  for (PageId p = lru_head_; p != kNoPage; p = lru_next_[p]) out.push_back(p);
  return out;
}

void BlockPool::lru_push_back(PageId page) {
  lru_prev_[page] = lru_tail_;
  lru_next_[page] = kNoPage;
  if (lru_tail_ != kNoPage) lru_next_[lru_tail_] = page;
  else lru_head_ = page;
  lru_tail_ = page;
  ++num_evictable_;
}

void BlockPool::lru_unlink(PageId page) {
  const PageId prev = lru_prev_[page], next = lru_next_[page];
  if (prev != kNoPage) lru_next_[prev] = next;
  else lru_head_ = next;
  if (next != kNoPage) lru_prev_[next] = prev;
  else lru_tail_ = prev;
  lru_prev_[page] = lru_next_[page] = kNoPage;
  --num_evictable_;
}

}  // namespace fp4::kvcache
