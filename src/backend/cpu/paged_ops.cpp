// The paged-cache ops of the CPU backend: cache writes, the MSA indexer and paged attention.
// Reads go through kvcache's page reference (read_page), so every cache format is exercised
// exactly as stored: attention sees the dequantized FP8/NVFP4 values, never the originals.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/check.h"
#include "core/thread_pool.h"
#include "formats/attention_operands.h"
#include "formats/e4m3_query.h"

namespace fp4::cpu {
namespace {

using kvcache::PageLayout;

int64_t page_of(const PagedContext& c, int64_t seq, int64_t block) {
  FP4_CHECK(block < c.max_blocks, "paged op: block {} of sequence {} is beyond the block table's "
            "{} entries", block, seq, c.max_blocks);
  return c.block_tables[seq * c.max_blocks + block];
}

// The dequantized K (and V) of the (sequence, block) pairs a step reads, each block read from
// its page once however many query tokens and heads use it.
class BlockCache {
 public:
  BlockCache(const PagedContext& c, const PageLayout& layout)
      : ctx_(c), layout_(layout), vec_(layout.vector_elems()),
        slot_(static_cast<size_t>(c.num_seqs * c.max_blocks), -1),
        last_pos_(static_cast<size_t>(c.num_seqs), -1) {
    for (int64_t t = 0; t < c.tokens; ++t) {
      int64_t& last = last_pos_[c.seq_of_token[t]];
      last = std::max<int64_t>(last, c.positions[t]);
    }
  }

  void need(int64_t seq, int64_t block) {
    int64_t& s = slot_[seq * ctx_.max_blocks + block];
    if (s < 0) {
      s = static_cast<int64_t>(wanted_.size());
      wanted_.push_back({seq, block});
    }
  }

  // Reads every needed block; a block holds the tokens up to the last query's position.
  void load(const uint8_t* pool, int64_t num_pages, kvcache::KvScales scales, float index_scale) {
    const int64_t block_elems = layout_.page_tokens * vec_;
    k_.assign(wanted_.size() * block_elems, 0.0f);
    if (layout_.has_v) v_.assign(wanted_.size() * block_elems, 0.0f);
    parallel_for_cost(static_cast<int64_t>(wanted_.size()), layout_.page_tokens * vec_ * 4,
                      [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const auto [seq, block] = wanted_[i];
        const int64_t page = page_of(ctx_, seq, block);
        FP4_CHECK(page >= 0 && page < num_pages, "paged op: sequence {} block {} maps to page {}, "
                  "outside the pool of {} pages", seq, block, page, num_pages);
        const int64_t first = block * layout_.page_tokens;
        const int tokens = static_cast<int>(
            std::min<int64_t>(layout_.page_tokens, last_pos_[seq] + 1 - first));
        const uint8_t* bytes = pool + page * layout_.page_bytes;
        if (layout_.has_v) {
          kvcache::read_page(layout_, bytes, tokens, &k_[i * block_elems], &v_[i * block_elems],
                             scales);
        } else {
          kvcache::read_index_page(layout_, bytes, tokens, &k_[i * block_elems], index_scale);
        }
      }
    });
  }

  // Token `offset` of the block's vector, all heads: [heads, head_dim].
  const float* k(int64_t seq, int64_t block, int64_t offset) const {
    return &k_[(slot_[seq * ctx_.max_blocks + block] * layout_.page_tokens + offset) * vec_];
  }
  const float* v(int64_t seq, int64_t block, int64_t offset) const {
    return &v_[(slot_[seq * ctx_.max_blocks + block] * layout_.page_tokens + offset) * vec_];
  }

 private:
  struct Wanted { int64_t seq, block; };
  const PagedContext& ctx_;
  const PageLayout& layout_;
  int64_t vec_;
  std::vector<int64_t> slot_;
  std::vector<int64_t> last_pos_;
  std::vector<Wanted> wanted_;
  std::vector<float> k_, v_;
};

float dot(const float* a, const float* b, int64_t n) {
  float acc[4] = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    for (int l = 0; l < 4; ++l) acc[l] += a[i + l] * b[i + l];
  }
  float tail = 0.0f;
  for (; i < n; ++i) tail += a[i] * b[i];
  return (acc[0] + acc[2]) + (acc[1] + acc[3]) + tail;
}

// An FP8 query as the indexer scores it: each head's rounding, read back (p.query_format is
// not kFP32).
std::vector<float> rounded_query(const IndexerTopkParams& p) {
  const int64_t rows = p.ctx.tokens * p.heads, d = p.head_dim;
  std::vector<float> q(p.index_q, p.index_q + rows * d);
  const int parts = p.query_format == IndexQueryFormat::kE4M3x2 ? 2 : 1;
  for (int64_t r = 0; r < rows; ++r) e4m3_query_round_row(&q[r * d], d, parts);
  return q;
}

void check_context(const PagedContext& c, const char* op) {
  for (int64_t t = 0; t < c.tokens; ++t) {
    FP4_CHECK(c.seq_of_token[t] >= 0 && c.seq_of_token[t] < c.num_seqs && c.positions[t] >= 0,
              "{}: token {} has sequence {} (of {}) and position {}", op, t, c.seq_of_token[t],
              c.num_seqs, c.positions[t]);
  }
}

}  // namespace

void cache_insert(const CacheInsertParams& p) {
  const PageLayout& l = *p.layout;
  FP4_CHECK(l.has_v == (p.v != nullptr), "cache_insert: V given for a K-only cache or missing");
  const int64_t vec = l.vector_elems();
  // Tokens of one page write disjoint slots, and NVFP4 blocks never straddle tokens, so tokens
  // can be written in parallel.
  parallel_for_cost(p.tokens, l.vector_elems() * 8, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t page = p.slots[t] / l.page_tokens;
      FP4_CHECK(p.slots[t] >= 0 && page < p.num_pages, "cache_insert: token {} slot {} is outside "
                "the pool of {} pages", t, p.slots[t], p.num_pages);
      uint8_t* bytes = p.pool + page * l.page_bytes;
      const int slot = static_cast<int>(p.slots[t] % l.page_tokens);
      if (l.has_v) {
        kvcache::write_token(l, bytes, slot, p.k + t * vec, p.v + t * vec, p.scales);
      } else {
        kvcache::write_index_token(l, bytes, slot, p.k + t * vec, p.scales.k);
      }
    }
  });
}

void indexer_topk(const IndexerTopkParams& p) {
  const PagedContext& c = p.ctx;
  check_context(c, "indexer_topk");
  if (c.tokens == 0) return;
  FP4_CHECK(p.topk > 0 && p.init_blocks + p.local_blocks <= p.topk,
            "indexer_topk: {} init + {} local forced blocks do not fit in top-{}", p.init_blocks,
            p.local_blocks, p.topk);
  const int64_t page_tokens = p.layout->page_tokens;
  BlockCache cache(c, *p.layout);
  for (int64_t t = 0; t < c.tokens; ++t) {
    for (int64_t b = 0; b <= c.positions[t] / page_tokens; ++b) cache.need(c.seq_of_token[t], b);
  }
  cache.load(p.pool, p.num_pages, {}, p.scale);
  const std::vector<float> rounded = p.query_format == IndexQueryFormat::kFP32 ? std::vector<float>{} : rounded_query(p);
  const float* query = rounded.empty() ? p.index_q : rounded.data();
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  parallel_for_cost(c.tokens * p.heads, (c.positions[c.tokens - 1] + 1) * p.head_dim,
                    [&](int64_t i0, int64_t i1) {
    std::vector<float> score;
    std::vector<int32_t> order;
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t t = i / p.heads, h = i % p.heads;
      const int64_t seq = c.seq_of_token[t], pos = c.positions[t];
      const int64_t blocks = pos / page_tokens + 1;
      int32_t* out = p.selected + (h * c.tokens + t) * p.topk;
      std::fill(out, out + p.topk, -1);
      if (blocks <= p.topk) {
        for (int64_t b = 0; b < blocks; ++b) out[b] = static_cast<int32_t>(b);
        continue;
      }
      const float* q = query + (t * p.heads + h) * p.head_dim;
      score.assign(static_cast<size_t>(blocks), kNegInf);
      for (int64_t b = 0; b < blocks; ++b) {
        const int64_t last = std::min(page_tokens, pos + 1 - b * page_tokens);
        for (int64_t j = 0; j < last; ++j) {
          score[b] = std::max(score[b], dot(q, cache.k(seq, b, j), p.head_dim));
        }
      }
      // Forced blocks first (by position), then the best of the rest.
      const int64_t local_first = blocks - p.local_blocks;
      order.clear();
      std::vector<bool> forced(static_cast<size_t>(blocks), false);
      for (int64_t b = 0; b < blocks; ++b) {
        forced[b] = b < p.init_blocks || b >= local_first;
        if (forced[b]) order.push_back(static_cast<int32_t>(b));
      }
      const size_t n_forced = order.size();
      for (int64_t b = 0; b < blocks; ++b) {
        if (!forced[b]) order.push_back(static_cast<int32_t>(b));
      }
      const size_t take = static_cast<size_t>(p.topk) - n_forced;
      std::partial_sort(order.begin() + n_forced, order.begin() + n_forced + take, order.end(),
                        [&](int32_t a, int32_t b) {
                          return score[a] != score[b] ? score[a] > score[b] : a < b;
                        });
      std::copy(order.begin(), order.begin() + p.topk, out);
      std::sort(out, out + p.topk);
    }
  });
}

void paged_attention(const PagedAttentionParams& p) {
  const PagedContext& c = p.ctx;
  check_context(c, "paged_attention");
  if (c.tokens == 0) return;
  FP4_CHECK(p.kv_heads > 0 && p.q_heads % p.kv_heads == 0,
            "paged_attention: {} query heads do not split over {} KV heads", p.q_heads, p.kv_heads);
  FP4_CHECK(p.operands == AttentionOperands::kFP32 || p.operands == AttentionOperands::k16Bit,
            "paged_attention: unknown operand precision {}", static_cast<int>(p.operands));
  const int64_t page_tokens = p.layout->page_tokens;
  const int64_t group = p.q_heads / p.kv_heads;
  auto selection = [&](int64_t g, int64_t t) { return p.selected + (g * c.tokens + t) * p.topk; };
  BlockCache cache(c, *p.layout);
  for (int64_t t = 0; t < c.tokens; ++t) {
    const int64_t blocks = c.positions[t] / page_tokens + 1;
    if (p.selected == nullptr) {
      for (int64_t b = 0; b < blocks; ++b) cache.need(c.seq_of_token[t], b);
      continue;
    }
    for (int64_t g = 0; g < p.kv_heads; ++g) {
      for (int64_t i = 0; i < p.topk; ++i) {
        const int32_t b = selection(g, t)[i];
        FP4_CHECK(b < blocks, "paged_attention: token {} at position {} selects block {}, after "
                  "its own", t, c.positions[t], b);
        if (b >= 0) cache.need(c.seq_of_token[t], b);
      }
    }
  }
  cache.load(p.pool, p.num_pages, p.scales, 1.0f);
  const int64_t d = p.head_dim;
  // 16-bit operands: FP16 for the formats whose values it holds exactly, BF16 otherwise.
  const bool rounded = p.operands == AttentionOperands::k16Bit;
  const bool f16 = p.layout->dtype == kvcache::PageDType::kFP8 || p.layout->dtype == kvcache::PageDType::kNVFP4;
  std::vector<float> q_rounded;
  if (rounded) {
    q_rounded.assign(p.q, p.q + c.tokens * p.q_heads * d);
    for (int64_t row = 0; row < c.tokens * p.q_heads; ++row) round_query_row_16bit(&q_rounded[row * d], d, f16);
  }
  const float* q_all = rounded ? q_rounded.data() : p.q;
  parallel_for_cost(c.tokens * p.kv_heads, (c.positions[c.tokens - 1] + 1) * group * d * 2,
                    [&](int64_t i0, int64_t i1) {
    std::vector<float> acc(static_cast<size_t>(group * d));
    std::vector<float> run_max(static_cast<size_t>(group)), run_sum(static_cast<size_t>(group));
    std::vector<int32_t> blocks_to_read;
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t t = i / p.kv_heads, g = i % p.kv_heads;
      const int64_t seq = c.seq_of_token[t], pos = c.positions[t];
      blocks_to_read.clear();
      if (p.selected == nullptr) {
        for (int64_t b = 0; b <= pos / page_tokens; ++b) blocks_to_read.push_back(static_cast<int32_t>(b));
      } else {
        for (int64_t s = 0; s < p.topk; ++s) {
          if (selection(g, t)[s] >= 0) blocks_to_read.push_back(selection(g, t)[s]);
        }
      }
      std::fill(acc.begin(), acc.end(), 0.0f);
      std::fill(run_max.begin(), run_max.end(), -std::numeric_limits<float>::infinity());
      std::fill(run_sum.begin(), run_sum.end(), 0.0f);
      for (int32_t b : blocks_to_read) {
        const int64_t last = std::min(page_tokens, pos + 1 - b * page_tokens);
        for (int64_t j = 0; j < last; ++j) {
          const float* k = cache.k(seq, b, j) + g * d;
          const float* v = cache.v(seq, b, j) + g * d;
          for (int64_t h = 0; h < group; ++h) {
            const float* q = q_all + (t * p.q_heads + g * group + h) * d;
            const float s = dot(q, k, d) * p.softmax_scale;
            // Online softmax: rescale what was accumulated when a new maximum appears.
            if (s > run_max[h]) {
              const float correction = std::exp(run_max[h] - s);
              run_sum[h] *= correction;
              for (int64_t e = 0; e < d; ++e) acc[h * d + e] *= correction;
              run_max[h] = s;
            }
            const float w = std::exp(s - run_max[h]);
            run_sum[h] += w;
            const float w_v = rounded ? round_to_16bit(w, f16) : w;  // the weight P V multiplies
            for (int64_t e = 0; e < d; ++e) acc[h * d + e] += w_v * v[e];
          }
        }
      }
      for (int64_t h = 0; h < group; ++h) {
        float* o = p.out + (t * p.q_heads + g * group + h) * d;
        // Every query sees at least its own key, so run_sum > 0.
        for (int64_t e = 0; e < d; ++e) o[e] = acc[h * d + e] / run_sum[h];
      }
    }
  });
}

}  // namespace fp4::cpu
