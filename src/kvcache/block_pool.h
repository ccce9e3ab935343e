// The page pool's host-side bookkeeping: which of the N pages (ids 0..N-1) are free, who holds
// the others, and which full pages are kept as a prefix cache. No device memory is touched
// here; a page id indexes every layer's K/V pool and index pool on the device.
//
// Every page is in exactly one of three states:
//   free       refcount 0, not cached: on the free list, its contents meaningless;
//   in use     refcount >= 1 (one reference per sequence whose block table holds it),
//              cached or private;
//   evictable  refcount 0 but cached: its K/V still describe a known prefix, so a new
//              sequence with that prefix can take it back instead of recomputing it.
//
// Why only full pages are cached: a partial page is still being written by its sequence, and
// two sequences that share it would write different tokens into the same slots. A full page
// is immutable, so any number of sequences may read it.
//
// Eviction order: allocation takes a free page first, so cached K/V survive as long as
// possible; only when the free list is empty does it evict the least recently released
// evictable page. Sequences release their pages last page first (KvCacheManager does that),
// so a prefix's tail is evicted before its head, which more requests share.
//
// A cached page stores its parent hash and its tokens (page_tokens x 4 B of host memory per
// page, against kilobytes to megabytes of device memory per page), and find_cached compares
// them: a hash collision within a page's own tokens can then never give a wrong hit.
//
// Allocation never throws: it returns std::nullopt when nothing can be had. Misuse (releasing a
// free page, an id out of range) throws fp4::Error, as it is a bug in the caller.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "kvcache/prefix_hash.h"
#include "kvcache/sizing.h"

namespace fp4::kvcache {

using PageId = int32_t;
constexpr PageId kNoPage = -1;

class BlockPool {
 public:
  explicit BlockPool(int32_t num_pages, int page_tokens = kPageTokens);

  // A page with refcount 1, private (not cached): a free page, else the least recently
  // released evictable page, whose cache entry is dropped.
  std::optional<PageId> allocate();
  // One more reference to a page in use or an evictable one (which is then in use again).
  void add_ref(PageId page);
  // One reference fewer; at 0 the page becomes free, or evictable when cached.
  void release(PageId page);

  // The cached page with this hash whose stored parent hash and tokens equal the arguments.
  std::optional<PageId> find_cached(PageHash hash, PageHash parent,
                                    std::span<const int32_t> tokens) const;
  // Registers a full page in use under `hash`. Returns false, leaving the page private, when
  // another page already holds the hash (a duplicate computed concurrently, or a collision).
  bool cache(PageId page, PageHash hash, PageHash parent, std::span<const int32_t> tokens);

  int32_t num_pages() const { return static_cast<int32_t>(refcount_.size()); }
  int page_tokens() const { return page_tokens_; }
  // Pages an allocation may take: free plus evictable.
  int32_t num_free() const { return static_cast<int32_t>(free_.size()) + num_evictable_; }
  int32_t num_used() const { return num_pages() - num_free(); }
  double usage() const { return num_pages() == 0 ? 0.0 : double(num_used()) / num_pages(); }
  int32_t num_cached() const { return static_cast<int32_t>(by_hash_.size()); }
  int32_t num_evictable() const { return num_evictable_; }

  int32_t refcount(PageId page) const;
  bool is_cached(PageId page) const;
  // The free list (pages neither in use nor cached) and the evictable pages, oldest first.
  std::span<const PageId> free_list() const { return free_; }
  std::vector<PageId> evictable_pages() const;

 private:
  void check_id(PageId page, const char* what) const;
  void lru_push_back(PageId page);
  void lru_unlink(PageId page);

  int page_tokens_;
  std::vector<int32_t> refcount_;
  std::vector<PageId> free_;  // a stack: the most recently freed page is reused first
  // Evictable pages as an intrusive doubly linked list (oldest at head), so that taking one
  // back by id is O(1) and allocation-free.
  std::vector<PageId> lru_prev_, lru_next_;
  PageId lru_head_ = kNoPage, lru_tail_ = kNoPage;
  int32_t num_evictable_ = 0;
  // Cache identity of each page (meaningful only while cached_[page]).
  std::vector<uint8_t> cached_;
  std::vector<PageHash> hash_, parent_;
  std::vector<int32_t> tokens_;  // [num_pages x page_tokens]
  std::unordered_map<PageHash, PageId> by_hash_;
};

}  // namespace fp4::kvcache
