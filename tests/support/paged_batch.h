// One step's query tokens over paged caches, for tests of the paged ops: each sequence has a
// context of `c` tokens whose last `q` positions are the step's queries, and its blocks sit on
// pages drawn from a shuffled pool (3 pages spare), so the page-table indirection is exercised.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "backend/model_ops.h"
#include "kvcache/sizing.h"

namespace fp4::testing {

struct PagedBatch {
  static constexpr int64_t kPage = kvcache::kPageTokens;
  std::vector<int32_t> context, positions, seq_of_token, tables;
  int64_t num_seqs = 0, max_blocks = 0, num_pages = 0;

  // (context, queries) per sequence; the sequences are shuffled too.
  PagedBatch(std::vector<std::pair<int32_t, int32_t>> seqs, std::mt19937_64& rng) {
    std::shuffle(seqs.begin(), seqs.end(), rng);
    num_seqs = static_cast<int64_t>(seqs.size());
    int64_t blocks = 0;
    for (auto [c, q] : seqs) {
      context.push_back(c);
      max_blocks = std::max<int64_t>(max_blocks, (c + kPage - 1) / kPage);
      blocks += (c + kPage - 1) / kPage;
    }
    num_pages = blocks + 3;
    std::vector<int32_t> pages(num_pages);
    std::iota(pages.begin(), pages.end(), 0);
    std::shuffle(pages.begin(), pages.end(), rng);
    tables.assign(num_seqs * max_blocks, -1);
    int next = 0;
    for (int64_t s = 0; s < num_seqs; ++s) {
      for (int64_t b = 0; b < (context[s] + kPage - 1) / kPage; ++b) tables[s * max_blocks + b] = pages[next++];
      for (int32_t pos = std::max(0, context[s] - seqs[s].second); pos < context[s]; ++pos) {
        positions.push_back(pos);
        seq_of_token.push_back(static_cast<int32_t>(s));
      }
    }
  }
  // The same `queries` for every context.
  PagedBatch(const std::vector<int32_t>& contexts, int32_t queries, std::mt19937_64& rng)
      : PagedBatch(with_queries(contexts, queries), rng) {}

  int64_t tokens() const { return static_cast<int64_t>(positions.size()); }
  int64_t slot(int64_t s, int64_t pos) const {
    return int64_t{tables[s * max_blocks + pos / kPage]} * kPage + pos % kPage;
  }
  // Host pointers into this batch, for the CPU ops.
  PagedContext ctx() const {
    return {positions.data(), seq_of_token.data(), tables.data(), tokens(), num_seqs, max_blocks};
  }

 private:
  static std::vector<std::pair<int32_t, int32_t>> with_queries(const std::vector<int32_t>& contexts,
                                                               int32_t queries) {
    std::vector<std::pair<int32_t, int32_t>> seqs;
    for (int32_t c : contexts) seqs.emplace_back(c, queries);
    return seqs;
  }
};

}  // namespace fp4::testing
