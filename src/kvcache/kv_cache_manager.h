// Sequences' block tables over one BlockPool, with prefix caching (vLLM's automatic prefix
// caching, nano-vllm's block manager shape: predicate/action pairs, pure host code).
//
// Life of a sequence:
//   can_add_sequence(prompt) / add_sequence(seq, prompt)
//       takes the longest cached prefix of the prompt (whole pages, shared by reference) and
//       allocates private pages for the rest of the prompt; returns how many tokens hit, whose
//       K/V need not be computed.
//   append(seq, tokens)
//       after the step that wrote their K/V: records the tokens; each page that becomes full
//       is hashed (chained on the previous page's hash) and offered to the prefix cache.
//   can_allocate(seq, n) / allocate(seq, n)
//       room for n tokens beyond those appended (a decode step asks for 1).
//   free(seq)
//       releases every page, last page first, so that the evictable list ages a prefix's
//       tail before its head.
//
// Every action either fully succeeds or changes nothing; the predicates say in advance which.
// The last token of a prompt is never taken from the cache, even when its page is cached: the
// model must run on at least one token to produce the next token's logits.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "kvcache/block_pool.h"
#include "kvcache/prefix_hash.h"

namespace fp4::kvcache {

using SeqId = int64_t;

// A sequence's pages in token order: page i holds tokens [i x page_tokens, (i+1) x page_tokens).
struct BlockTable {
  std::vector<PageId> pages;
};

// As vLLM's prefix-cache metrics count them: per admitted sequence, its prompt tokens are
// queried and the cached ones are hits, so hits / queries is the token hit rate.
struct PrefixCacheStats {
  int64_t requests = 0;
  int64_t queries = 0;  // tokens
  int64_t hits = 0;     // tokens
};

class KvCacheManager {
 public:
  KvCacheManager(int32_t num_pages, const PrefixHashKey& key, int page_tokens = kPageTokens);

  // The cached pages holding the longest prefix of `tokens` made of whole pages.
  std::vector<PageId> match_prefix(std::span<const int32_t> tokens) const;
  int64_t cached_prefix_tokens(std::span<const int32_t> tokens) const;

  bool can_add_sequence(std::span<const int32_t> prompt) const;
  // The number of prompt tokens found in the cache, or std::nullopt (nothing changed) when the
  // pool cannot hold the prompt. `seq` must be new and the prompt non-empty.
  std::optional<int64_t> add_sequence(SeqId seq, std::span<const int32_t> prompt);

  bool can_allocate(SeqId seq, int64_t n) const;
  bool allocate(SeqId seq, int64_t n);

  // The tokens must fit in the pages already allocated.
  void append(SeqId seq, std::span<const int32_t> tokens);
  void free(SeqId seq);

  const BlockTable& block_table(SeqId seq) const { return get(seq).table; }
  std::span<const int32_t> tokens(SeqId seq) const { return get(seq).tokens; }
  int64_t num_tokens(SeqId seq) const { return static_cast<int64_t>(get(seq).tokens.size()); }
  bool contains(SeqId seq) const { return seqs_.contains(seq); }
  size_t num_sequences() const { return seqs_.size(); }

  const BlockPool& pool() const { return pool_; }
  const PrefixCacheStats& stats() const { return stats_; }
  int page_tokens() const { return page_tokens_; }

 private:
  struct Sequence {
    BlockTable table;
    std::vector<int32_t> tokens;
    std::vector<PageHash> hashes;  // one per full page
  };

  // match_prefix limited to whole pages within the first `max_tokens` tokens, with the hashes
  // of the matched pages.
  std::vector<PageId> match(std::span<const int32_t> tokens, int64_t max_tokens,
                            std::vector<PageHash>* hashes) const;
  int64_t pages_needed(int64_t tokens) const;
  Sequence& get(SeqId seq);
  const Sequence& get(SeqId seq) const;

  BlockPool pool_;
  PrefixHashKey key_;
  int page_tokens_;
  std::unordered_map<SeqId, Sequence> seqs_;
  PrefixCacheStats stats_;
};

}  // namespace fp4::kvcache
