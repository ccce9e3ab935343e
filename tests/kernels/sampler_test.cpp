// The CUDA sampler against sampling::sample(), row by row, on fresh random rows each run.
// Tokens must be the host's exactly. Logprobs: the host sums S = sum exp(l - M) in ascending id
// order, the GPU in parallel, so L = log S differs by at most E = (V + 64) * 2^-52 (derivation at
// log_sum_slack). The GPU's logprob of token i must be float((l_i - M) - L') for some L' within
// 2E of the host's L, i.e. lie in [lo_i, hi_i] (check_logprobs), a single value unless the
// host's double lies that close to a float rounding boundary. Ranks and top lists must be the
// host's wherever no token is that close, and consistent with [lo_i, hi_i] where one is; rows of
// either kind, and rows whose logprobs are not the host's bits, are counted and printed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <random>
#include <set>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device.h"
#include "backend/cuda/sampler.h"
#include "core/check.h"
#include "core/thread_pool.h"
#include "sampling/sampler.h"
#include "tests/support/gpu_test.h"
#include "tests/support/random.h"

namespace fp4 {
namespace {

static_assert(kMaxSampleLogprobs == sampling::kMaxLogprobs);
static_assert(kSampleGreedyBelow == sampling::kSamplingEps);

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr int kTop = kMaxSampleLogprobs;

// SamplingParams by designated initializers (its own would leave the optional seed unnamed).
struct Knobs {
  float temperature = 1.0f;
  int top_k = -1;
  float top_p = 1.0f, min_p = 0.0f, repetition = 1.0f, frequency = 0.0f, presence = 0.0f;
  int logprobs = -1;
  operator sampling::SamplingParams() const {
    sampling::SamplingParams p;
    p.temperature = temperature, p.top_k = top_k, p.top_p = top_p, p.min_p = min_p;
    p.repetition_penalty = repetition, p.frequency_penalty = frequency, p.presence_penalty = presence;
    p.logprobs = logprobs;
    return p;
  }
};

struct RowSpec {
  sampling::SamplingParams params;
  std::vector<int32_t> prompt = {}, output = {}, banned = {};
  uint64_t seed = 0;
  int64_t step = 0;
};

struct Batch {
  int64_t vocab = 0;
  std::vector<float> logits;  // [rows, vocab]
  std::vector<RowSpec> rows;
};

struct Outputs {
  std::vector<int32_t> token, rank, top_ids;
  std::vector<float> logprob, top_logprobs;
  bool operator==(const Outputs& o) const {  // bitwise, for run-to-run determinism
    const auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
      return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
    };
    return token == o.token && rank == o.rank && top_ids == o.top_ids && same(logprob, o.logprob) &&
           same(top_logprobs, o.top_logprobs);
  }
};

sampling::TokenCounts counts_of(const RowSpec& r, int64_t vocab) {
  sampling::TokenCounts c(vocab);
  c.add_prompt(r.prompt);
  for (int32_t t : r.output) c.add_output(t);
  return c;
}

// The device op on the whole batch, outputs poisoned first (and scratch, which it must not read
// before writing); with `graph`, captured into a CUDA graph on a stream and replayed.
Outputs run_gpu(const Batch& b, bool graph = false) {
  const int64_t rows = static_cast<int64_t>(b.rows.size()), vocab = b.vocab;
  std::vector<SampleRow> req;
  std::vector<int32_t> seen, counts, banned;
  std::vector<uint8_t> in_prompt;
  for (const RowSpec& r : b.rows) {
    const sampling::SamplingParams& sp = r.params;
    SampleRow q{.temperature = sp.temperature, .top_k = sp.top_k, .top_p = sp.top_p, .min_p = sp.min_p,
                .repetition_penalty = sp.repetition_penalty, .frequency_penalty = sp.frequency_penalty,
                .presence_penalty = sp.presence_penalty, .logprobs = sp.logprobs, .seed = r.seed, .step = r.step};
    const auto c = counts_of(r, vocab);
    q.seen_begin = static_cast<int32_t>(seen.size());
    q.seen_count = static_cast<int32_t>(c.seen_tokens().size());
    for (size_t j = 0; j < c.seen_tokens().size(); ++j) {
      seen.push_back(c.seen_tokens()[j]);
      counts.push_back(c.seen_entries()[j].output_count);
      in_prompt.push_back(c.seen_entries()[j].in_prompt ? 1 : 0);
    }
    q.banned_begin = static_cast<int32_t>(banned.size());
    q.banned_count = static_cast<int32_t>(r.banned.size());
    banned.insert(banned.end(), r.banned.begin(), r.banned.end());
    req.push_back(q);
  }
  const auto d_logits = cuda::DeviceBuffer::copy_of(b.logits), d_rows = cuda::DeviceBuffer::copy_of(req);
  const auto d_seen = cuda::DeviceBuffer::copy_of(seen), d_counts = cuda::DeviceBuffer::copy_of(counts);
  const auto d_prompt = cuda::DeviceBuffer::copy_of(in_prompt), d_banned = cuda::DeviceBuffer::copy_of(banned);
  cuda::DeviceBuffer scratch(rows * vocab * 4), token(rows * 4), logprob(rows * 4), rank(rows * 4);
  cuda::DeviceBuffer top_ids(rows * kTop * 4), top_lp(rows * kTop * 4);
  for (auto* d : {&scratch, &token, &logprob, &rank, &top_ids, &top_lp}) d->fill(0xA7);
  const SampleParams p{.logits = d_logits.as<float>(), .rows = rows, .vocab = vocab, .row = d_rows.as<SampleRow>(),
                       .seen_tokens = d_seen.as<int32_t>(), .seen_output_counts = d_counts.as<int32_t>(),
                       .seen_in_prompt = d_prompt.as<uint8_t>(), .banned = d_banned.as<int32_t>(),
                       .scratch = scratch.as<float>(), .token = token.as<int32_t>(), .logprob = logprob.as<float>(),
                       .rank = rank.as<int32_t>(), .top_ids = top_ids.as<int32_t>(),
                       .top_logprobs = top_lp.as<float>()};
  if (graph) {
    cudaStream_t stream;
    cudaGraph_t g;
    cudaGraphExec_t exec;
    FP4_CUDA_CHECK(cudaStreamCreate(&stream));
    FP4_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    cuda::sample(p, stream);
    FP4_CUDA_CHECK(cudaStreamEndCapture(stream, &g));
    FP4_CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
    FP4_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    FP4_CUDA_CHECK(cudaStreamSynchronize(stream));
    FP4_CUDA_CHECK(cudaGraphExecDestroy(exec));
    FP4_CUDA_CHECK(cudaGraphDestroy(g));
    FP4_CUDA_CHECK(cudaStreamDestroy(stream));
  } else {
    cuda::sample(p, nullptr);
  }
  FP4_CUDA_CHECK(cudaDeviceSynchronize());
  const auto after = d_logits.download_vector<float>(b.logits.size());
  EXPECT_EQ(std::memcmp(after.data(), b.logits.data(), after.size() * sizeof(float)), 0) << "the logits were modified";
  return {token.download_vector<int32_t>(rows), rank.download_vector<int32_t>(rows),
          top_ids.download_vector<int32_t>(rows * kTop), logprob.download_vector<float>(rows),
          top_lp.download_vector<float>(rows * kTop)};
}

struct Reference {
  std::vector<float> row;  // banned ids at -inf: what the host samples
  bool refused = false;    // the host threw fp4::Error
  sampling::SampleResult result;
};

std::vector<Reference> run_host(const Batch& b) {
  std::vector<Reference> refs(b.rows.size());
  parallel_for(static_cast<int64_t>(refs.size()), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const RowSpec& spec = b.rows[r];
      Reference& ref = refs[r];
      ref.row.assign(b.logits.begin() + r * b.vocab, b.logits.begin() + (r + 1) * b.vocab);
      for (int32_t t : spec.banned) {
        if (t >= 0 && t < b.vocab) ref.row[t] = -kInf;
      }
      try {
        ref.result = sampling::sample(ref.row, spec.params, counts_of(spec, b.vocab), spec.seed, spec.step);
      } catch (const Error&) {
        ref.refused = true;
      }
    }
  });
  return refs;
}

// |log S_host - log S_gpu| <= (V + V/1024 + 77) u with u = 2^-53: the host's sequential sum of V
// positive terms errs by at most (V - 1) u S, the GPU's (per-thread runs of V/1024 terms, then two
// 32-way trees) by (V/1024 + 10) u S; each exp is within 1 ulp (2u relative) on either side, and
// each log within 1 ulp of L <= ln 2^23 < 16, another 64u. That is at most (V + 64) 2u = E; the
// margin used is 2E, which also covers the rounding of L +- 2E itself.
double log_sum_slack(int64_t vocab) { return 2.0 * static_cast<double>(vocab + 64) * 0x1p-52; }

struct Stats {
  int rows = 0, refused = 0, with_logprobs = 0, ambiguous = 0, differs = 0;
  std::set<int32_t> tokens;
};

// Host and GPU lists agree on the tokens whose logprob is unambiguous: one list, so filtered,
// is a prefix of the other.
bool unambiguous_prefix(std::vector<int32_t> a, std::vector<int32_t> b, const std::vector<char>& ambiguous) {
  const auto keep = [&](std::vector<int32_t>& v) { std::erase_if(v, [&](int32_t id) { return ambiguous[id]; }); };
  keep(a);
  keep(b);
  if (a.size() > b.size()) std::swap(a, b);
  return std::equal(a.begin(), a.end(), b.begin());
}

void check_logprobs(const Reference& ref, const Outputs& got, int64_t r, int num_top, Stats& stats) {
  const std::vector<float>& row = ref.row;
  const int64_t vocab = static_cast<int64_t>(row.size());
  // sampling::RawLogprobs' numbers, the same operations in the same order.
  float max = row[0];
  for (float v : row) max = std::max(max, v);
  double sum = 0.0;
  for (float v : row) sum += std::exp(static_cast<double>(v) - max);
  const double log_sum = std::log(sum), slack = log_sum_slack(vocab);
  const auto at = [&](int64_t i, double l) { return static_cast<float>((static_cast<double>(row[i]) - max) - l); };
  const int32_t tok = ref.result.token;
  ASSERT_EQ(at(tok, log_sum), ref.result.logprob) << "the test's copy of the host's formula drifted";
  std::vector<float> lo(vocab), hi(vocab);
  std::vector<char> ambiguous(vocab);
  bool any = false;
  for (int64_t i = 0; i < vocab; ++i) {
    lo[i] = at(i, log_sum + slack);
    hi[i] = at(i, log_sum - slack);
    ambiguous[i] = lo[i] != hi[i];
  }
  const float lp = got.logprob[r];
  EXPECT_TRUE(lo[tok] <= lp && lp <= hi[tok])
      << "row " << r << ": logprob " << lp << ", host " << ref.result.logprob << ", allowed [" << lo[tok] << ", "
      << hi[tok] << "]";
  int rank_lo = 1, rank_hi = 1;
  for (int64_t i = 0; i < vocab; ++i) {
    rank_lo += lo[i] > hi[tok];
    rank_hi += hi[i] > lo[tok];
  }
  any |= rank_lo != rank_hi;
  EXPECT_TRUE(rank_lo <= ref.result.rank && ref.result.rank <= rank_hi) << "row " << r << ": test's bounds";
  EXPECT_TRUE(rank_lo <= got.rank[r] && got.rank[r] <= rank_hi)
      << "row " << r << ": rank " << got.rank[r] << ", host " << ref.result.rank << ", allowed [" << rank_lo << ", "
      << rank_hi << "]";
  // The top list: valid, distinct, sorted by (logprob desc, id asc), each value in its interval,
  // no token left out that would have to rank above the last, and the host's on unambiguous ids.
  const int listed = static_cast<int>(std::min<int64_t>(num_top, vocab));
  std::vector<int32_t> ids(got.top_ids.begin() + r * kTop, got.top_ids.begin() + r * kTop + listed), want;
  const float* lps = got.top_logprobs.data() + r * kTop;
  for (const auto& e : ref.result.top_logprobs) want.push_back(e.first);
  ASSERT_EQ(static_cast<int>(want.size()), listed);
  for (int j = 0; j < kTop; ++j) {
    if (j >= listed) {
      EXPECT_EQ(got.top_ids[r * kTop + j], -1) << "row " << r << " slot " << j;
      EXPECT_EQ(lps[j], 0.0f) << "row " << r << " slot " << j;
      continue;
    }
    const int32_t id = ids[j];
    ASSERT_TRUE(id >= 0 && id < vocab) << "row " << r << " slot " << j << ": id " << id;
    any |= ambiguous[id] != 0;
    EXPECT_TRUE(lo[id] <= lps[j] && lps[j] <= hi[id]) << "row " << r << " slot " << j << ": id " << id;
    if (j > 0) {
      EXPECT_TRUE(lps[j - 1] > lps[j] || (lps[j - 1] == lps[j] && ids[j - 1] < id)) << "row " << r << " slot " << j;
    }
  }
  if (ids != want) {
    any = true;
    EXPECT_TRUE(unambiguous_prefix(ids, want, ambiguous)) << "row " << r << ": top ids differ from the host's";
    if (listed > 0 && listed < vocab) {
      std::vector<char> in_list(vocab);
      for (int32_t id : ids) in_list[id] = 1;
      for (int64_t i = 0; i < vocab; ++i) {
        if (in_list[i]) continue;
        ASSERT_TRUE(lo[i] < lps[listed - 1] || (lo[i] == lps[listed - 1] && i > ids[listed - 1]))
            << "row " << r << ": token " << i << " belongs in the top list";
      }
    }
  }
  stats.ambiguous += any;
  bool same = lp == ref.result.logprob && got.rank[r] == ref.result.rank && ids == want;
  for (int j = 0; j < listed; ++j) same &= lps[j] == ref.result.top_logprobs[j].second;
  stats.differs += !same;
}

void compare(const Batch& b, const Outputs& got, Stats& stats) {
  const auto refs = run_host(b);
  for (size_t r = 0; r < refs.size(); ++r) {
    const Reference& ref = refs[r];
    const sampling::SamplingParams& sp = b.rows[r].params;
    SCOPED_TRACE(::testing::Message() << "row " << r << " of " << refs.size() << ", vocab " << b.vocab << ": T "
                                      << sp.temperature << ", top_k " << sp.top_k << ", top_p " << sp.top_p
                                      << ", min_p " << sp.min_p << ", penalties " << sp.repetition_penalty << "/"
                                      << sp.frequency_penalty << "/" << sp.presence_penalty << ", logprobs "
                                      << sp.logprobs << ", banned " << b.rows[r].banned.size());
    ++stats.rows;
    const bool listed = !ref.refused && sp.logprobs >= 0;
    if (ref.refused) {
      ++stats.refused;
      EXPECT_EQ(got.token[r], -1) << "the host refuses this row";
    } else {
      ASSERT_EQ(got.token[r], ref.result.token);
      stats.tokens.insert(got.token[r]);
    }
    if (listed) {
      ++stats.with_logprobs;
      check_logprobs(ref, got, static_cast<int64_t>(r), sp.logprobs, stats);
      continue;
    }
    EXPECT_EQ(got.logprob[r], 0.0f);
    EXPECT_EQ(got.rank[r], 0);
    for (int j = 0; j < kTop; ++j) {
      EXPECT_EQ(got.top_ids[r * kTop + j], -1);
      EXPECT_EQ(got.top_logprobs[r * kTop + j], 0.0f);
    }
  }
}

template <typename T>
T pick(std::initializer_list<T> options, std::mt19937_64& rng) {
  return options.begin()[std::uniform_int_distribution<size_t>(0, options.size() - 1)(rng)];
}

sampling::SamplingParams random_params(int64_t vocab, std::mt19937_64& rng) {
  sampling::SamplingParams p;
  p.temperature = pick({0.0f, 0.3f, 1.0f, 1.0f, 1.7f}, rng);
  p.top_k = static_cast<int>(pick<int64_t>({-1, -1, 0, 1, 5, 50, vocab - 1, vocab}, rng));
  p.top_p = pick({1.0f, 1.0f, 0.01f, 0.5f, 0.9f, 0.999999f}, rng);
  p.min_p = pick({0.0f, 0.0f, 0.05f, 0.5f}, rng);
  if (rng() % 2) {
    p.repetition_penalty = pick({0.7f, 1.0f, 1.3f}, rng);
    p.frequency_penalty = pick({0.0f, -0.5f, 1.1f, 2.0f}, rng);
    p.presence_penalty = pick({0.0f, 0.7f, -1.5f}, rng);
  }
  p.logprobs = pick({-1, -1, 0, 5, 20}, rng);
  return p;
}

enum class Kind { kGaussian, kWide, kRounded, kNegInf, kOneFinite, kHuge, kStudent, kZeros };

void fill_row(float* row, int64_t vocab, Kind kind, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(-1e4f, 1e4f);
  std::student_t_distribution<float> student(3.0f);
  for (int64_t i = 0; i < vocab; ++i) {
    switch (kind) {
      case Kind::kGaussian: row[i] = normal(rng); break;
      case Kind::kWide: row[i] = 4.0f * normal(rng); break;
      case Kind::kRounded: row[i] = std::round(2.0f * normal(rng)) * 0.5f; break;  // a dozen values, -0 too
      case Kind::kNegInf: row[i] = rng() % 10 < 3 ? -kInf : 3.0f * normal(rng); break;
      case Kind::kOneFinite: row[i] = -kInf; break;
      case Kind::kHuge: row[i] = uniform(rng); break;
      case Kind::kStudent: row[i] = 2.0f * student(rng); break;
      case Kind::kZeros: row[i] = rng() % 2 ? 0.0f : -0.0f; break;
    }
  }
  if (kind == Kind::kOneFinite) row[rng() % vocab] = normal(rng);
}

RowSpec random_row(int64_t vocab, std::mt19937_64& rng) {
  RowSpec r;
  r.params = random_params(vocab, rng);
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(vocab - 1));
  // Ids from a small pool now and then, so that tokens repeat in the output.
  const int32_t pool = rng() % 2 ? static_cast<int32_t>(std::min<int64_t>(vocab, 16)) : static_cast<int32_t>(vocab);
  for (int n = static_cast<int>(rng() % 30); n > 0; --n) r.prompt.push_back(id(rng) % pool);
  for (int n = static_cast<int>(rng() % 20); n > 0; --n) r.output.push_back(id(rng) % pool);
  if (rng() % 4 == 0) {
    for (int n = 1 + static_cast<int>(rng() % 5); n > 0; --n) r.banned.push_back(id(rng));
  }
  r.seed = rng();
  r.step = static_cast<int64_t>(rng() % 1000);
  return r;
}

Batch random_batch(int64_t vocab, int rows, std::mt19937_64& rng) {
  Batch b{vocab, std::vector<float>(rows * vocab), {}};
  for (int r = 0; r < rows; ++r) {
    const Kind kind = static_cast<Kind>(rng() % 8);
    fill_row(b.logits.data() + r * vocab, vocab, kind, rng);
    b.rows.push_back(random_row(vocab, rng));
  }
  return b;
}

void print(const char* what, const Stats& s) {
  std::printf("[ sampler  ] %s: %d rows, %d refused, %d with logprobs (%d within the slack of a float rounding "
              "boundary, %d not the host's bits), %zu distinct tokens\n",
              what, s.rows, s.refused, s.with_logprobs, s.ambiguous, s.differs, s.tokens.size());
}

class SamplerKernel : public testing::GpuTest {};

TEST_F(SamplerKernel, MixedBatchesMatchTheHost) {
  auto rng = testing::seeded_rng(71);
  SCOPED_TRACE(::testing::Message() << "FP4_TEST_SEED=" << testing::test_seed());
  Stats stats;
  for (int64_t vocab : {1, 2, 7, 1000, 32000, 151936, 200064}) {
    for (int rows : {1, 64, 1 + static_cast<int>(rng() % 64)}) {
      const Batch b = random_batch(vocab, rows, rng);
      const Outputs got = run_gpu(b);
      // Run to run, and replayed from a CUDA graph (no host synchronisation or allocation inside).
      EXPECT_TRUE(run_gpu(b, /*graph=*/vocab == 1000) == got) << "a second run differs";
      compare(b, got, stats);
      if (HasFatalFailure()) return;
    }
  }
  print("mixed batches", stats);
}

TEST_F(SamplerKernel, LargestVocabulary) {
  auto rng = testing::seeded_rng(72);
  SCOPED_TRACE(::testing::Message() << "FP4_TEST_SEED=" << testing::test_seed());
  Batch b = random_batch(int64_t{1} << 23, 3, rng);
  b.rows[0].params = Knobs{.temperature = 1.0f, .logprobs = 20};
  b.rows[1].params = Knobs{.temperature = 0.7f, .top_k = 100000, .top_p = 0.9f};
  Stats stats;
  compare(b, run_gpu(b), stats);
  print("vocab 2^23", stats);
}

// One row of logits, 256 seeds each, for a few filter settings: the draws must follow the host's
// to the token, and spread over several tokens where the distribution allows it.
TEST_F(SamplerKernel, DrawsFollowTheHostOverManySeeds) {
  auto rng = testing::seeded_rng(73);
  SCOPED_TRACE(::testing::Message() << "FP4_TEST_SEED=" << testing::test_seed());
  const std::vector<Knobs> settings = {
      {.temperature = 1.0f},
      {.temperature = 1.7f, .top_k = 50},
      {.temperature = 1.0f, .top_p = 0.9f, .repetition = 1.3f, .frequency = -0.5f},
      {.temperature = 0.3f, .min_p = 0.05f, .presence = 1.0f},
      {.temperature = 1.0f, .top_k = 5, .top_p = 0.5f, .min_p = 0.05f},
  };
  for (int64_t vocab : {1000, 32000}) {
    for (const auto& params : settings) {
      Batch b{vocab, {}, {}};
      std::vector<float> row(vocab);
      fill_row(row.data(), vocab, rng() % 2 ? Kind::kGaussian : Kind::kRounded, rng);
      RowSpec spec = random_row(vocab, rng);
      spec.params = params;
      spec.banned.clear();
      Stats stats;
      for (int batch = 0; batch < 4; ++batch) {
        b.logits.clear();
        b.rows.clear();
        for (int r = 0; r < 64; ++r) {
          b.logits.insert(b.logits.end(), row.begin(), row.end());
          spec.seed = rng();
          spec.step = static_cast<int64_t>(rng() % 100000);
          b.rows.push_back(spec);
        }
        compare(b, run_gpu(b), stats);
        if (HasFatalFailure()) return;
      }
      // All 256 draws land on one token with probability at most p_max^255: below 2e-12 once
      // p_max < 0.9.
      const auto dist = sampling::sampling_distribution(row, params, counts_of(spec, vocab));
      if (*std::max_element(dist.begin(), dist.end()) < 0.9) {
        EXPECT_GT(stats.tokens.size(), 1u);
      }
      print("seeds", stats);
    }
  }
}

// Hand-made rows: ties everywhere, signed zeros, a penalty that overflows to -inf (not a ban:
// its raw logprob stays finite), one-token vocabularies, and rows the host refuses.
TEST_F(SamplerKernel, TiesEdgesAndRefusedRows) {
  auto rng = testing::seeded_rng(74);
  SCOPED_TRACE(::testing::Message() << "FP4_TEST_SEED=" << testing::test_seed());
  const int64_t vocab = 7;
  Batch b{vocab, {}, {}};
  const auto add = [&](std::vector<float> row, Knobs params, std::vector<int32_t> banned = {},
                       std::vector<int32_t> output = {}) {
    b.logits.insert(b.logits.end(), row.begin(), row.end());
    RowSpec spec{.params = params, .output = output, .banned = banned, .seed = rng(), .step = 3};
    b.rows.push_back(spec);
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> ties = {1, 2, 2, 0, 2, -0.0f, 2};
  for (int lp : {-1, 0, 5, 20}) {
    add(ties, {.temperature = 0.0f, .logprobs = lp});
    add(ties, {.temperature = 1.0f, .top_k = 2, .logprobs = lp});
    add(ties, {.temperature = 1.0f, .top_p = 0.3f, .logprobs = lp});
    add(ties, {.temperature = 1.0f, .top_p = 0.6f, .min_p = 0.5f, .logprobs = lp});
    add({0.0f, -0.0f, 0.0f, -0.0f, -0.0f, 0.0f, 0.0f}, {.temperature = 1.0f, .top_p = 0.5f, .logprobs = lp});
    add({-0.0f, 0.0f, -kInf, 0.0f, -0.0f, -kInf, 0.0f}, {.temperature = 0.0f, .logprobs = lp});
    add({-3e38f, 1, 2, 3, 4, 5, 6}, {.temperature = 1.0f, .repetition = 10.0f, .logprobs = lp}, {}, {0});
    add({-kInf, -kInf, 4, -kInf, -kInf, -kInf, -kInf}, {.temperature = 1.0f, .top_k = 3, .logprobs = lp});
    add({1, 2, 3, 4, 5, 6, 7}, {.temperature = 1.0f, .logprobs = lp}, {6, 5, 6, 99, -1});  // repeats, out of range
  }
  // Refused: every token banned; NaN; +inf; x = l / T overflowing; parameters out of range.
  add({1, 2, 3, 4, 5, 6, 7}, {.temperature = 1.0f, .logprobs = 5}, {0, 1, 2, 3, 4, 5, 6});
  add({1, nan, 3, 4, 5, 6, 7}, {.temperature = 1.0f});
  add({1, kInf, 3, 4, 5, 6, 7}, {.temperature = 0.0f});
  add({1, 3e38f, 3, 4, 5, 6, 7}, {.temperature = 0.5f});
  add({1, 2, 3, 4, 5, 6, 7}, {.temperature = 1.0f, .min_p = 1.5f});
  add({1, 2, 3, 4, 5, 6, 7}, {.temperature = 1.0f, .frequency = 3.0f});
  add({1, 2, 3, 4, 5, 6, 7}, {.temperature = -1.0f});
  add({1, kInf, 3, 4, 5, 6, 7}, {.temperature = 1.0f, .logprobs = 2}, {1});  // banned +inf is just banned
  Stats stats;
  compare(b, run_gpu(b), stats);
  EXPECT_EQ(stats.refused, 7);
  print("edge rows", stats);
  // One-token vocabularies, every setting.
  Batch one{1, {}, {}};
  for (int i = 0; i < 64; ++i) {
    one.logits.push_back(i % 3 == 0 ? -5.0f : 2.5f);
    one.rows.push_back(random_row(1, rng));
  }
  compare(one, run_gpu(one), stats);
}

// Host-side checks need no GPU: bad shapes are refused before launch; an empty batch launches
// nothing (null pointers included).
TEST(SamplerContract, ChecksShapesAndSkipsEmptyBatches) {
  SampleParams p;
  p.vocab = 10;
  EXPECT_NO_THROW(cuda::sample(p, nullptr));
  p.vocab = 0;
  EXPECT_THROW(cuda::sample(p, nullptr), Error);
  p.vocab = (int64_t{1} << 23) + 1;
  EXPECT_THROW(check_sample_params(p), Error);
  p.vocab = 10;
  p.rows = -1;
  EXPECT_THROW(check_sample_params(p), Error);
  p.rows = 2;
  EXPECT_THROW(check_sample_params(p), Error);  // no pointers
  std::vector<float> host(64);
  p.logits = host.data();
  p.scratch = host.data() + 20;
  p.row = reinterpret_cast<const SampleRow*>(host.data());
  p.token = p.rank = p.top_ids = reinterpret_cast<int32_t*>(host.data());
  p.logprob = p.top_logprobs = host.data();
  EXPECT_NO_THROW(check_sample_params(p));
  p.scratch = host.data();
  EXPECT_THROW(check_sample_params(p), Error);  // scratch over the logits
}

}  // namespace
}  // namespace fp4
