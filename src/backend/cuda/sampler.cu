// The sampling kernel: one block of 1,024 threads per row (docs/kernels/sampler.md). Every
// decision is made on the host sampler's own numbers: the same float penalties and division,
// the same integer weights (sampling_weights.h, evaluated in double with -fmad=false), exact
// integer sums, and the same comparisons, so reduction order never matters. Ids fit in int
// (vocab <= 2^23); only row offsets need 64 bits.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/sampler.h"
#include "backend/cuda/sampler_block.cuh"
#include "backend/sampling_rng.h"
#include "backend/sampling_weights.h"

namespace fp4::cuda::detail {
namespace {

// The first id, ascending, at which the running sum of contrib(i, x) exceeds target(total), or -1.
// One pass sums each tile (warp sums added to shared words: integers, any order); the tile that
// holds the target is found by a scan over the tile sums and scanned again id by id.
template <typename Contrib, typename Target>
__device__ int locate(const float* xs, int vocab, Shared& s, Contrib contrib, Target target_of) {
  const int tiles = (vocab + kTile - 1) / kTile;
  for (int t = threadIdx.x; t < tiles; t += kThreads) s.tile_lo[t] = s.tile_hi[t] = 0;
  if (threadIdx.x == 0) s.pick_tile = s.pick_id = -1;
  __syncthreads();
  for (int t = 0; t < tiles; ++t) {
    const int first = t * kTile + static_cast<int>(threadIdx.x);
    float v[kItems];
#pragma unroll
    for (int j = 0; j < kItems; ++j) v[j] = first + j * kThreads < vocab ? xs[first + j * kThreads] : 0.0f;
    u64 sum = 0;
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      if (first + j * kThreads < vocab) sum += contrib(first + j * kThreads, as_x(v[j]));
    }
    sum = warp_reduce(sum, Sum{});
    if (lane_id() == 0 && sum != 0) add_u64(&s.tile_lo[t], &s.tile_hi[t], sum);
  }
  __syncthreads();
  const u64 mine = static_cast<int>(threadIdx.x) < tiles ? word(s.tile_lo, s.tile_hi, threadIdx.x) : 0;
  u64 total;
  const u64 before = block_exclusive_scan(mine, s.red, &total);
  const u64 target = target_of(total);
  if (before <= target && target - before < mine) {
    s.pick_tile = static_cast<int>(threadIdx.x);
    s.pick_before = before;
  }
  __syncthreads();
  const int tile = s.pick_tile;
  const u64 tile_before = s.pick_before;
  __syncthreads();
  if (tile < 0) return -1;  // block-uniform
  const int first = tile * kTile + static_cast<int>(threadIdx.x) * kItems;
  u64 local = 0;
  for (int j = 0; j < kItems; ++j) {
    if (first + j < vocab) local += contrib(first + j, load_x(xs, first + j));
  }
  u64 unused;
  u64 run = tile_before + block_exclusive_scan(local, s.red, &unused);
  if (run <= target && target - run < local) {
    for (int j = 0; j < kItems && first + j < vocab; ++j) {
      run += contrib(first + j, load_x(xs, first + j));
      if (run > target) {
        s.pick_id = first + j;
        break;
      }
    }
  }
  __syncthreads();
  const int id = s.pick_id;
  __syncthreads();
  return id;
}

// Coarse bins of m - x, 1/64 wide: monotone in x (bin 0 holds the largest), spread evenly over
// real logits where the bits of the key crowd into a few exponents. A token of nonzero weight
// has m - x <= 27.8, so all of them are binned; -1 for the rest.
__device__ __forceinline__ int coarse_bin(float x, float m) {
  const float d = m - x;
  return d <= 28.0f ? static_cast<int>(d * 64.0f) : -1;
}

// The split of the row, in the top-p order (key descending, id ascending), at the first token
// where pred(running sum of value(x, key)) holds. pred(sum, total) must be monotone in sum and
// false at 0; total is the sum over all binned tokens. value may not depend on the id.
struct Cut {
  bool found;  // pred(total) holds
  uint32_t key;
  int id;      // that token's id; with need_id false, -1 unless the fast path found it anyway
};

// The fallback for a boundary bin too crowded for shared memory (ties, or millions of tokens):
// three histogram passes over the digits of the key, restricted to the bin, then the id by count.
template <typename Value, typename Pred>
__device__ Cut cut_by_radix(const float* xs, int vocab, float m, int bin, u64 above, u64 total, Shared& s,
                            Value value, Pred pred, bool need_id) {
  uint32_t prefix = 0;
  u64 at = 0;
  for (int level = 0; level < 3; ++level) {
    const int shift = level == 0 ? 21 : level == 1 ? 10 : 0, bits = level == 2 ? 10 : 11;
    const int bins = 1 << bits, high = shift + bits;
    for (int b = threadIdx.x; b < bins; b += kThreads) {
      s.h.words[b] = s.h.words[kBins + b] = 0;
      s.first_id[b] = 0xFFFFFFFFu;
    }
    __syncthreads();
    for_each(xs, vocab, [&](int i, float raw) {
      const float x = as_x(raw);
      const uint32_t key = order_key(x);
      if (coarse_bin(x, m) != bin || (high < 32 && (key >> high) != prefix)) return;
      const u64 v = value(x, key);
      if (v == 0) return;
      const uint32_t digit = (key >> shift) & (bins - 1);
      add_u64(&s.h.words[digit], &s.h.words[kBins + digit], v);
      if (level == 2) atomicMin(&s.first_id[digit], static_cast<uint32_t>(i));
    });
    __syncthreads();
    // Thread t holds the bins from the top: an exclusive scan in thread order is the sum above.
    const int per = bins / kThreads, top_bin = bins - 1 - static_cast<int>(threadIdx.x) * per;
    u64 local = 0, unused;
    for (int j = 0; j < per; ++j) local += word(s.h.words, s.h.words + kBins, top_bin - j);
    u64 run = above + block_exclusive_scan(local, s.red, &unused);
    for (int j = 0; j < per; ++j) {
      const u64 v = word(s.h.words, s.h.words + kBins, top_bin - j);
      if (!pred(run, total) && pred(run + v, total)) {
        s.pick_bin = top_bin - j;
        s.pick_above = run;
        s.pick_at = v;
      }
      run += v;
    }
    __syncthreads();
    prefix = (prefix << bits) | static_cast<uint32_t>(s.pick_bin);
    above = s.pick_above;
    at = s.pick_at;
    __syncthreads();
  }
  if (!need_id) return {true, prefix, -1};
  // The key's tokens, in id order, all add the same value: the c-th of them is the cut.
  const u64 v = value(key_value(prefix), prefix);
  u64 lo = 1, hi = v == 0 ? 1 : at / v;
  while (lo < hi) {
    const u64 mid = lo + (hi - lo) / 2;
    if (pred(above + mid * v, total)) hi = mid;
    else lo = mid + 1;
  }
  if (lo == 1) return {true, prefix, static_cast<int>(s.first_id[prefix % 1024])};
  const u64 c = lo;
  const int id = locate(
      xs, vocab, s, [prefix](int, float x) -> u64 { return order_key(x) == prefix ? 1 : 0; },
      [c](u64) { return c - 1; });
  return {true, prefix, id};
}

// One pass bins every token by coarse_bin; the bin holding the cut is found by a scan over the
// bins. A second pass gathers that bin's tokens into shared memory, which sorts them (bitonic)
// and scans them in order. Two passes over the row whatever the data, unless the bin overflows.
template <typename Value, typename Pred>
__device__ Cut find_cut(const float* xs, int vocab, float m, Shared& s, Value value, Pred pred, bool need_id) {
  for (int b = threadIdx.x; b < kBins; b += kThreads) s.h.words[b] = s.h.words[kBins + b] = 0;
  if (threadIdx.x == 0) s.pick_bin = -1;
  __syncthreads();
  for_each(xs, vocab, [&](int, float raw) {
    const float x = as_x(raw);
    const int b = coarse_bin(x, m);
    if (b < 0) return;
    const u64 v = value(x, order_key(x));
    if (v != 0) add_u64(&s.h.words[b], &s.h.words[kBins + b], v);
  });
  __syncthreads();
  const int b0 = 2 * static_cast<int>(threadIdx.x);
  const u64 v0 = word(s.h.words, s.h.words + kBins, b0), v1 = word(s.h.words, s.h.words + kBins, b0 + 1);
  u64 total;
  const u64 run = block_exclusive_scan(v0 + v1, s.red, &total);
  if (!pred(run, total) && pred(run + v0, total)) {
    s.pick_bin = b0;
    s.pick_above = run;
  } else if (!pred(run + v0, total) && pred(run + v0 + v1, total)) {
    s.pick_bin = b0 + 1;
    s.pick_above = run + v0;
  }
  __syncthreads();
  const int bin = s.pick_bin;
  const u64 above = s.pick_above;
  if (threadIdx.x == 0) s.count = 0;
  __syncthreads();  // the histogram's words become the candidate list
  if (bin < 0) return {false, 0, -1};
  for_each(xs, vocab, [&](int i, float raw) {
    const float x = as_x(raw);
    if (coarse_bin(x, m) != bin) return;
    const uint32_t key = order_key(x);
    if (value(x, key) == 0) return;
    const uint32_t slot = atomicAdd(&s.count, 1u);
    if (slot < kBins) s.h.cand[slot] = pack(key, i);
  });
  __syncthreads();
  const int n = static_cast<int>(s.count);
  if (n > kBins) return cut_by_radix(xs, vocab, m, bin, above, total, s, value, pred, need_id);
  int size = 1;
  while (size < n) size *= 2;
  for (int i = n + static_cast<int>(threadIdx.x); i < size; i += kThreads) s.h.cand[i] = 0;
  __syncthreads();
  for (int k = 2; k <= size; k *= 2) {
    for (int j = k / 2; j > 0; j /= 2) {
      for (int i = threadIdx.x; i < size; i += kThreads) {
        const int other = i ^ j;
        if (other <= i) continue;
        const u64 a = s.h.cand[i], b = s.h.cand[other];
        if ((i & k) == 0 ? a < b : a > b) {  // descending overall
          s.h.cand[i] = b;
          s.h.cand[other] = a;
        }
      }
      __syncthreads();
    }
  }
  const auto value_of = [&](int j) -> u64 {
    if (j >= n) return 0;
    const uint32_t key = static_cast<uint32_t>(s.h.cand[j] >> 32);
    return value(key_value(key), key);
  };
  const u64 w0 = value_of(b0), w1 = value_of(b0 + 1);
  u64 unused;
  const u64 before = above + block_exclusive_scan(w0 + w1, s.red, &unused);
  int pick = -1;
  if (!pred(before, total) && pred(before + w0, total)) pick = b0;
  else if (!pred(before + w0, total) && pred(before + w0 + w1, total)) pick = b0 + 1;
  if (pick >= 0) s.pick_cand = s.h.cand[pick];
  __syncthreads();
  const u64 cut = s.pick_cand;
  __syncthreads();
  return {true, static_cast<uint32_t>(cut >> 32), packed_id(cut)};
}

// SamplingParams::validate()'s ranges, as the host refuses a row.
__device__ bool row_is_valid(const SampleRow& q) {
  return isfinite(q.temperature) && q.temperature >= 0.0f && q.top_k >= -1 && q.top_p > 0.0f && q.top_p <= 1.0f &&
         q.min_p >= 0.0f && q.min_p <= 1.0f && isfinite(q.repetition_penalty) && q.repetition_penalty > 0.0f &&
         q.frequency_penalty >= -2.0f && q.frequency_penalty <= 2.0f && q.presence_penalty >= -2.0f &&
         q.presence_penalty <= 2.0f && q.logprobs >= -1 && q.logprobs <= kTop && q.step >= 0;
}

// sampling::apply_penalties on one seen token.
__device__ float penalize(float l, const SampleRow& q, int32_t output_count, bool in_prompt) {
  if (in_prompt || output_count > 0) l = l > 0.0f ? l / q.repetition_penalty : l * q.repetition_penalty;
  if (output_count > 0) {
    l = l - q.frequency_penalty * static_cast<float>(output_count);
    l = l - q.presence_penalty;
  }
  return l;
}

// Steps 1-2 of sampler.h into the scratch row: x = l / temperature (l when greedy), seen tokens
// recomputed from their penalized logit, banned tokens marked last (a banned token is -inf
// whatever its penalties would make of it).
__device__ void prepare_row(const SampleParams& p, const SampleRow& q, const float* logits, float* xs,
                            int vocab, bool greedy) {
  int i = threadIdx.x;
  for (; i + 3 * kThreads < vocab; i += 4 * kThreads) {  // loads ahead of stores, as in for_each
    float l[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) l[j] = __ldg(logits + i + j * kThreads);
#pragma unroll
    for (int j = 0; j < 4; ++j) xs[i + j * kThreads] = greedy ? l[j] : l[j] / q.temperature;
  }
  for (; i < vocab; i += kThreads) xs[i] = greedy ? __ldg(logits + i) : __ldg(logits + i) / q.temperature;
  __syncthreads();
  const bool penalties = q.repetition_penalty != 1.0f || q.frequency_penalty != 0.0f || q.presence_penalty != 0.0f;
  if (penalties) {
    for (int j = threadIdx.x; j < q.seen_count; j += kThreads) {
      const int64_t e = int64_t{q.seen_begin} + j;
      const int32_t tok = p.seen_tokens[e];
      if (tok < 0 || tok >= vocab) continue;
      const float l = penalize(__ldg(logits + tok), q, p.seen_output_counts[e], p.seen_in_prompt[e] != 0);
      xs[tok] = greedy ? l : l / q.temperature;
    }
  }
  __syncthreads();
  for (int j = threadIdx.x; j < q.banned_count; j += kThreads) {
    const int32_t tok = p.banned[int64_t{q.banned_begin} + j];
    if (tok >= 0 && tok < vocab) xs[tok] = __uint_as_float(kBannedBits);
  }
  __syncthreads();
}

// Steps 3-5 of sampler.h given m, the largest x. Each filter becomes a bound on (key, id): top-k
// keeps key >= kth; top-p keeps key > tp, and key == tp up to id last; min-p compares each
// weight. The draw then scans the survivors in id order.
__device__ int draw(const float* xs, int vocab, const SampleRow& q, float m, Shared& s) {
  uint32_t kth = 0;  // every key is >= 0
  if (q.top_k > 0 && q.top_k < vocab) {
    const u64 k = static_cast<u64>(q.top_k);
    // Not found: fewer than k tokens are binned, so the k-th largest weighs 0 and top-k removes
    // no token that could be drawn.
    const Cut c = find_cut(
        xs, vocab, m, s, [](float, uint32_t) { return u64{1}; }, [k](u64 count, u64) { return count >= k; },
        /*need_id=*/false);
    if (c.found) kth = c.key;
  }
  const bool top_p = q.top_p < 1.0f;
  uint32_t tp = 0;
  int last = vocab;
  if (top_p) {
    const double p = q.top_p;
    const Cut c = find_cut(
        xs, vocab, m, s,
        [kth, m](float x, uint32_t key) -> u64 { return key >= kth ? sampling::token_weight(x, m) : 0; },
        [p](u64 mass, u64 total) { return static_cast<double>(mass) >= p * static_cast<double>(total); },
        /*need_id=*/true);
    tp = c.key;
    last = c.id;
  }
  const bool min_p = q.min_p > 0.0f;
  const double min_weight = static_cast<double>(q.min_p) * sampling::kWeightOne;
  // Below this d, e^d (1 + 1e-14) 2^40 < min_p 2^40 e^-1e-6 and the weight fails min-p for sure:
  // the weight is not worth computing.
  const double min_d = min_p ? log(static_cast<double>(q.min_p)) - 1e-6 : 0.0;
  const uint64_t bits = sampling::random_bits(q.seed, q.step);
  return locate(
      xs, vocab, s,
      [=](int i, float x) -> u64 {
        const uint32_t key = order_key(x);
        if (key < kth) return 0;
        if (top_p && (key < tp || (key == tp && i > last))) return 0;
        if (min_p && static_cast<double>(x) - static_cast<double>(m) < min_d) return 0;
        const u64 w = sampling::token_weight(x, m);
        if (min_p && static_cast<double>(w) < min_weight) return 0;
        return w;
      },
      [bits](u64 total) -> u64 { return sampling::uniform_below(bits, total); });
}

// A warp's 20 largest keys, descending: lane j < 20 holds the j-th (0: empty). Offers one
// candidate per lane; all 32 lanes must call it together.
__device__ void offer(u64& entry, u64 cand) {
  const int lane = lane_id();
  unsigned want = __ballot_sync(0xFFFFFFFFu, cand > __shfl_sync(0xFFFFFFFFu, entry, kTop - 1));
  while (want != 0) {
    const int src = __ffs(want) - 1;
    want &= want - 1;
    const u64 v = __shfl_sync(0xFFFFFFFFu, cand, src);
    if (v <= __shfl_sync(0xFFFFFFFFu, entry, kTop - 1)) continue;  // a lane before it raised the bar
    const int pos = __popc(__ballot_sync(0xFFFFFFFFu, lane < kTop && entry > v));
    const u64 up = __shfl_up_sync(0xFFFFFFFFu, entry, 1);
    if (lane == pos) entry = v;
    else if (lane > pos) entry = up;
  }
}

struct Logprobs {
  float chosen = 0.0f;
  int rank = 0;
  u64 top = 0;  // warp 0, lane j < 20: the j-th best (key, id) of the row
  double max = 0.0, log_sum = 0.0;
};

// sampling::fill_logprobs on the raw row. M and the float logprobs are the host's formulas; the
// sum S is taken in parallel (host: ascending id), so log S may differ from the host's in its
// last bits. Rank and order compare the float logprobs themselves, ties included, as the host.
__device__ Logprobs logprobs(const float* logits, const float* xs, int vocab, int token, float raw_max, Shared& s) {
  Logprobs out;
  out.max = raw_max;
  double sum = 0.0;
  for_each_pair(xs, logits, vocab,
                [&](int, float v, float l) { sum += exp(static_cast<double>(as_raw(v, l)) - out.max); });
  out.log_sum = log(block_reduce(sum, s.red_d, Sum{}));
  const auto logprob = [&](float raw) {
    return static_cast<float>((static_cast<double>(raw) - out.max) - out.log_sum);
  };
  out.chosen = logprob(load_raw(logits, xs, token));
  u64 higher = 0, entry = 0;
  for (int base = warp_id() * 32; base < vocab; base += 4 * kThreads) {  // warp-uniform trip count
    float raw[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int i = base + j * kThreads + lane_id();
      raw[j] = i < vocab ? load_raw(logits, xs, i) : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int i = base + j * kThreads + lane_id();
      u64 cand = 0;
      if (i < vocab) {
        const float v = logprob(raw[j]);
        higher += v > out.chosen;
        cand = pack(order_key(v), i);
      }
      offer(entry, cand);
    }
  }
  out.rank = 1 + static_cast<int>(block_reduce(higher, s.red, Sum{}));
  if (lane_id() < kTop) s.h.merge[warp_id() * kTop + lane_id()] = entry;
  __syncthreads();
  if (warp_id() == 0) {
    u64 merged = 0;
    for (int b = 0; b < kTop; ++b) offer(merged, s.h.merge[b * 32 + lane_id()]);
    out.top = merged;
  }
  __syncthreads();
  return out;
}

__global__ void __launch_bounds__(kThreads, 1) sample_kernel(const SampleParams p) {
  __shared__ Shared s;
  const int64_t row = blockIdx.x;
  const int vocab = static_cast<int>(p.vocab);
  const SampleRow q = p.row[row];
  const float* logits = p.logits + row * p.vocab;
  float* xs = p.scratch + row * p.vocab;
  if (threadIdx.x == 0) {
    s.pick_bin = s.pick_tile = s.pick_id = 0;
    s.pick_above = s.pick_at = s.pick_before = s.pick_cand = 0;
  }
  int token = -1;
  float raw_max = 0.0f;
  if (row_is_valid(q)) {  // block-uniform, as every branch below
    const bool greedy = q.temperature < kSampleGreedyBelow;
    prepare_row(p, q, logits, xs, vocab, greedy);
    u64 best = 0, raw_best = 0;
    bool bad = false;  // a NaN in the row: the host refuses it
    const auto visit = [&](int i, float v) {
      bad |= isnan(v) && __float_as_uint(v) != kBannedBits;
      best = max(best, pack(order_key(as_x(v)), i));
    };
    // The raw row's maximum for the logprobs in the same pass.
    if (q.logprobs >= 0) {
      for_each_pair(xs, logits, vocab, [&](int i, float v, float l) {
        visit(i, v);
        raw_best = max(raw_best, pack(order_key(as_raw(v, l)), i));
      });
    } else {
      for_each(xs, vocab, visit);
    }
    bad = __syncthreads_or(bad);
    best = block_reduce(best, s.red, Max{});
    // The host's M is the first maximum (std::max keeps it): its exact float, sign of zero too.
    if (q.logprobs >= 0) raw_max = load_raw(logits, xs, packed_id(block_reduce(raw_best, s.red, Max{})));
    const float m = key_value(static_cast<uint32_t>(best >> 32));
    if (!bad && isfinite(m)) token = greedy ? packed_id(best) : draw(xs, vocab, q, m, s);
  }
  Logprobs lp;
  const bool want_logprobs = token >= 0 && q.logprobs >= 0;
  if (want_logprobs) lp = logprobs(logits, xs, vocab, token, raw_max, s);
  if (threadIdx.x == 0) {
    p.token[row] = token;
    p.logprob[row] = want_logprobs ? lp.chosen : 0.0f;
    p.rank[row] = want_logprobs ? lp.rank : 0;
  }
  if (threadIdx.x < kTop) {
    const int j = threadIdx.x;
    const bool listed = want_logprobs && j < q.logprobs && lp.top != 0;
    const int id = listed ? packed_id(lp.top) : -1;
    p.top_ids[row * kTop + j] = id;
    p.top_logprobs[row * kTop + j] =
        listed ? static_cast<float>((static_cast<double>(load_raw(logits, xs, id)) - lp.max) - lp.log_sum) : 0.0f;
  }
}

}  // namespace

cudaError_t launch_sample(const SampleParams& p, cudaStream_t stream) {
  sample_kernel<<<static_cast<unsigned>(p.rows), kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace fp4::cuda::detail
