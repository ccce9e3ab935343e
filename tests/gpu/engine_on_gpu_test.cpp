// The engine on the GPU against the CPU engine, on real checkpoints: the built-in M3-format
// model (MSA indexer and sparse attention, MoE with NVFP4 experts, every cache format) and
// stories260K (a dense Llama with 8-dim heads), greedy, every step's logits compared. The serving
// engine's batched steps are compared too.
//
// Tolerances and the comparison: tests/gpu/greedy_compare.h.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/device.h"
#include "engine/engine.h"
#include "engine/generator.h"
#include "formats/mxfp8.h"
#include "tests/gpu/greedy_compare.h"
#include "tests/support/random.h"
#include "tests/support/random_model.h"

namespace fp4::engine {
namespace {

using kvcache::PageDType;

std::string model_dir(const char* env) {
  const char* dir = std::getenv(env);
  return dir != nullptr ? dir : "";
}

class EngineOnGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device visible; GPU engine tests need one";
  }
};

// The GPU engine with the exact indexer: its block scores are the CPU's operations on the GPU's
// index q and k, so a selection can differ only where those differ by their few ulps at a tie.
// (The tensor-core scores, within their own bound, can pick a different block at a near-tie,
// and one block more or less moves a token's attention far beyond the budgets above.)
LoadedModel load_on_gpu(const std::string& dir, cuda::IndexerMath math = cuda::IndexerMath::kExact) {
  LoadedModel m = load_model({.model_dir = dir, .device = "cuda"});
  EXPECT_EQ(m.backend->name(), "cuda");
  static_cast<cuda::CudaBackend&>(*m.backend).set_indexer_math(math);
  return m;
}

TEST_F(EngineOnGpu, BuiltInModelAgreesWithTheCpuInEveryCacheFormat) {
  const std::string dir = model_dir("FP4_DEFAULT_MODEL");
  ASSERT_FALSE(dir.empty()) << "FP4_DEFAULT_MODEL must name the built-in model's directory";
  const LoadedModel cpu = load_model({.model_dir = dir, .device = "cpu"});
  const LoadedModel gpu = load_on_gpu(dir);
  const LoadedModel gpu_tc = load_on_gpu(dir, cuda::IndexerMath::kTensorCores);
  auto rng = testing::seeded_rng(80);
  const int64_t vocab = cpu.config.vocab_size;
  // 4K: 32 blocks, so the indexer keeps 16 of them; 16K: 128 blocks.
  for (int64_t context : {4096, 16384}) {
    std::vector<int32_t> prompt(static_cast<size_t>(context - 64));
    std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(vocab - 4));
    for (int32_t& t : prompt) t = token(rng);
    for (PageDType cache : {PageDType::kFP32, PageDType::kBF16, PageDType::kFP8, PageDType::kNVFP4}) {
      if (context > 4096 && cache != PageDType::kNVFP4 && cache != PageDType::kBF16) continue;
      const std::string what = fmt::format("built-in model, {} cache, {} context",
                                           kvcache::page_dtype_name(cache), context);
      const Greedy want = run(cpu, cache, prompt, 64), got = run(gpu, cache, prompt, 64);
      // FP32 index pages hold the GPU's index K as computed, so the exact scores can part from
      // the CPU's only by ulps: the same blocks. Quantized pages can hold a code one step away
      // where the two index K straddle a rounding boundary, which may swap blocks at a near-tie.
      if (cache == PageDType::kFP32) {
        EXPECT_EQ(got.prompt_selection, want.prompt_selection) << what << ": the indexer chose other blocks";
      } else if (got.prompt_selection != want.prompt_selection) {
        std::printf("[  NOTE    ] %s: %lld selected blocks of the prompt's last token differ\n", what.c_str(),
                    static_cast<long long>(differing_ids(got.prompt_selection, want.prompt_selection)));
      }
      const bool strict = cache == PageDType::kFP32;
      expect_same_greedy(want, got, vocab, budget(cache, cpu), what, strict);
      // The default, tensor-core indexer: reported, not asserted beyond a selection change.
      const Greedy tc = run(gpu_tc, cache, prompt, 64);
      if (tc.prompt_selection == want.prompt_selection) {
        expect_same_greedy(want, tc, vocab, budget(cache, cpu), what + ", tensor-core indexer", strict);
      } else {
        int64_t same = 0;
        while (same < 64 && tc.tokens[same] == want.tokens[same]) ++same;
        std::printf("[  NOTE    ] %s, tensor-core indexer: another block chosen for the prompt's last "
                    "token; %lld of 64 greedy tokens agree\n", what.c_str(), static_cast<long long>(same));
      }
    }
  }
}

// The built-in model with its attention and index projections made MXFP8, as an MXFP8
// checkpoint holds them: the GPU holds them as MXFP8 codes (the skinny kernel at decode, the
// decoded BF16 weight and three products for the prompt) and agrees with the CPU on the same
// numbers as the unchanged model does (FP32 cache, every step within the budget).
TEST_F(EngineOnGpu, Mxfp8HeldProjectionsAgreeWithTheCpu) {
  const std::string dir = model_dir("FP4_DEFAULT_MODEL");
  ASSERT_FALSE(dir.empty()) << "FP4_DEFAULT_MODEL must name the built-in model's directory";
  LoadedModel cpu = load_model({.model_dir = dir, .device = "cpu"});
  for (model::LayerWeights& l : cpu.weights.layers) {
    for (model::LinearWeight* p : {&l.attn.q, &l.attn.k, &l.attn.v, &l.attn.o, &l.attn.index_q, &l.attn.index_k}) {
      if (p->w.empty()) continue;
      ASSERT_EQ(p->in % kMxfp8BlockElems, 0);
      uint8_t codes[kMxfp8BlockElems];
      for (size_t b = 0; b < p->w.size(); b += kMxfp8BlockElems) {
        mxfp8_dequantize_block(codes, mxfp8_quantize_block(&p->w[b], codes), &p->w[b]);
      }
    }
  }
  cpu.resident = std::make_unique<model::ResidentWeights>(cpu.weights, *cpu.backend);
  auto backend = std::make_unique<cuda::CudaBackend>();
  backend->set_indexer_math(cuda::IndexerMath::kExact);
  const LoadedModel gpu = testing::same_model_on(cpu, std::move(backend));
  ASSERT_NE((*gpu.resident)(gpu.weights.layers[0].attn.q).w_e4m3, nullptr) << "q is not held as MXFP8";
  auto rng = testing::seeded_rng(83);
  const int64_t vocab = cpu.config.vocab_size;
  std::vector<int32_t> prompt(4032);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(vocab - 4));
  for (int32_t& t : prompt) t = token(rng);
  const Greedy want = run(cpu, PageDType::kFP32, prompt, 32), got = run(gpu, PageDType::kFP32, prompt, 32);
  EXPECT_EQ(got.prompt_selection, want.prompt_selection) << "the indexer chose other blocks";
  expect_same_greedy(want, got, vocab, budget(PageDType::kFP32, cpu), "built-in model, MXFP8 attention, fp32 cache");
}

// Attention with 16-bit operands on both engines (the CPU rounds Q and the weights as the
// kernels do): the greedy tokens agree as above, in the caches whose operands are FP16 (NVFP4)
// and BF16. The two sides' weights still differ where their exponentials (a few ulp apart)
// fall on either side of a 16-bit rounding boundary, by one 16-bit ulp, so the engines part
// further than with FP32 operands (logits up to 3e-3 of the largest against 3e-4, measured at
// 4K). That is enough to tip the indexer between two near-tied blocks, and one block more or
// less moves a token's attention by that block's share, far past any rounding budget; so can
// a router between two near-tied experts, in any prompt token or step. So the logits are held
// to the budget while both engines chose the same blocks and experts; from the first step
// where they did not, the greedy tokens are checked (a different token only at a near-tie) and
// the difference is reported. Then the CPU engine runs again taking the GPU's choices (its
// tokens, every prompt token's and step's experts and blocks), and every step's logits are held
// to the budget: the arithmetic, compared without the near-ties.
TEST_F(EngineOnGpu, SixteenBitAttentionOperandsAgreeWithTheCpu) {
  const std::string dir = model_dir("FP4_DEFAULT_MODEL");
  ASSERT_FALSE(dir.empty()) << "FP4_DEFAULT_MODEL must name the built-in model's directory";
  const LoadedModel cpu = load_model({.model_dir = dir, .device = "cpu"});
  const LoadedModel gpu = load_on_gpu(dir);
  auto rng = testing::seeded_rng(82);
  std::vector<int32_t> prompt(4096 - 64);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(cpu.config.vocab_size - 4));
  for (int32_t& t : prompt) t = token(rng);
  for (PageDType cache : {PageDType::kBF16, PageDType::kNVFP4}) {
    const std::string what = fmt::format("built-in model, 16-bit attention operands, {} cache",
                                         kvcache::page_dtype_name(cache));
    const Greedy want = run(cpu, cache, prompt, 64, false, nullptr, AttentionOperands::k16Bit, true);
    GenerateResult gpu_run;
    const Greedy got = run(gpu, cache, prompt, 64, false, nullptr, AttentionOperands::k16Bit, true, &gpu_run);
    const bool same_blocks = got.prompt_selection == want.prompt_selection;
    if (!same_blocks) {
      std::printf("[  NOTE    ] %s: %lld selected blocks of the prompt's last token differ\n", what.c_str(),
                  static_cast<long long>(differing_ids(got.prompt_selection, want.prompt_selection)));
    }
    expect_same_greedy(want, got, cpu.config.vocab_size, budget(cache, cpu), what, same_blocks);
    GenerateResult followed_run;
    const Greedy followed = run(cpu, cache, prompt, 64, false, nullptr, AttentionOperands::k16Bit, true,
                                &followed_run, &gpu_run);
    EXPECT_EQ(followed_run.prompt_selections, gpu_run.prompt_selections) << what;
    EXPECT_EQ(followed.prompt_routes, got.prompt_routes) << what;
    EXPECT_EQ(followed.selections, got.selections) << what;
    EXPECT_EQ(followed.routes, got.routes) << what;
    expect_same_greedy(followed, got, cpu.config.vocab_size, budget(cache, cpu),
                       what + ", the CPU taking the GPU's choices", /*strict=*/true);
  }
}

// The prefill attention kernel in every layer (the built-in model's are all sparse, where the
// default keeps the decode kernel): prompt chunks of 2,048 tokens go through it, and the greedy
// tokens must agree with the CPU's as above.
TEST_F(EngineOnGpu, PrefillKernelInSparseLayersAgreesWithTheCpu) {
  const std::string dir = model_dir("FP4_DEFAULT_MODEL");
  ASSERT_FALSE(dir.empty()) << "FP4_DEFAULT_MODEL must name the built-in model's directory";
  const LoadedModel cpu = load_model({.model_dir = dir, .device = "cpu"});
  const LoadedModel gpu = load_on_gpu(dir);
  static_cast<cuda::CudaBackend&>(*gpu.backend).set_prefill_attention(cuda::PrefillKernelUse::kAll);
  auto rng = testing::seeded_rng(81);
  std::vector<int32_t> prompt(4096 - 64);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(cpu.config.vocab_size - 4));
  for (int32_t& t : prompt) t = token(rng);
  for (PageDType cache : {PageDType::kBF16, PageDType::kFP8, PageDType::kNVFP4}) {
    const std::string what = fmt::format("built-in model, prefill kernel, {} cache", kvcache::page_dtype_name(cache));
    const Greedy want = run(cpu, cache, prompt, 64), got = run(gpu, cache, prompt, 64);
    expect_same_greedy(want, got, cpu.config.vocab_size, budget(cache, cpu), what, false);
  }
}

TEST_F(EngineOnGpu, Stories260kWritesTheSameStory) {
  const std::string dir = model_dir("FP4_STORIES260K");
  ASSERT_FALSE(dir.empty()) << "FP4_STORIES260K must name the converted stories260K directory";
  const LoadedModel cpu = load_model({.model_dir = dir, .device = "cpu"});
  const LoadedModel gpu = load_on_gpu(dir);
  ASSERT_TRUE(cpu.tokenizer.has_value());
  const std::vector<int32_t> prompt = cpu.tokenizer->encode("Once upon a time", true);  // with BOS
  const Greedy want = run(cpu, PageDType::kFP32, prompt, 400), got = run(gpu, PageDType::kFP32, prompt, 400);
  const int64_t steps = expect_same_greedy(want, got, cpu.config.vocab_size, budget(PageDType::kFP32, cpu), "stories260K");
  const std::vector<int32_t> same(want.tokens.begin(), want.tokens.begin() + steps);
  std::printf("[  STORY   ] %s\n", cpu.tokenizer->decode(same, true).c_str());
}

// Decode steps replayed from recorded CUDA graphs run the very kernels of the eager steps on
// the same shapes (the block tables are padded alike), so the logits are the same bits.
TEST_F(EngineOnGpu, RecordedDecodeStepsGiveTheEagerBits) {
  const std::string dir = model_dir("FP4_DEFAULT_MODEL");
  ASSERT_FALSE(dir.empty()) << "FP4_DEFAULT_MODEL must name the built-in model's directory";
  const LoadedModel gpu = load_on_gpu(dir, cuda::IndexerMath::kTensorCores);
  auto rng = testing::seeded_rng(82);
  // 3,000 tokens: the 64 steps cross a block boundary (24 -> 25 blocks, padded to 32 alike).
  std::vector<int32_t> prompt(3000);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(gpu.config.vocab_size - 4));
  for (int32_t& t : prompt) t = token(rng);
  for (PageDType cache : {PageDType::kBF16, PageDType::kNVFP4}) {
    int64_t recorded = 0;
    const Greedy graphs = run(gpu, cache, prompt, 64, false, &recorded);
    const Greedy eager = run(gpu, cache, prompt, 64, true);
    EXPECT_GE(recorded, 1) << "no decode step was recorded";
    EXPECT_EQ(graphs.tokens, eager.tokens) << kvcache::page_dtype_name(cache);
    EXPECT_EQ(graphs.logits, eager.logits) << kvcache::page_dtype_name(cache) << ": replayed logits differ";
    std::printf("[  CHECKED ] %s cache: 64 decode steps from %lld recorded graph(s) equal the eager steps\n",
                std::string(kvcache::page_dtype_name(cache)).c_str(), static_cast<long long>(recorded));
    // The step's buffers came from the recording arena, so the graph holds kernels (and the
    // step's copies) but no memory node, and the kernels built as programmatic dependents
    // start early in the graph as they do op by op.
    const cuda::GraphCensus graph = static_cast<cuda::CudaBackend&>(*gpu.backend).last_recording();
    EXPECT_GT(graph.kernels, 0);
    EXPECT_EQ(graph.memory_nodes, 0) << "a recorded step allocated from the stream-ordered pool";
    EXPECT_GT(graph.programmatic_edges, 0) << "no kernel of the recorded step is a programmatic dependent";
    std::printf("[  CHECKED ] the last recorded step: %lld kernels, %lld other nodes, %lld of %lld edges programmatic\n",
                static_cast<long long>(graph.kernels), static_cast<long long>(graph.other_nodes),
                static_cast<long long>(graph.programmatic_edges), static_cast<long long>(graph.edges));
  }
}

// The serving engine's steps batch several sequences (prefill chunks beside decodes); each
// request's tokens must be the CPU engine's.
TEST_F(EngineOnGpu, BatchedServingStepsAgreeWithTheCpu) {
  const std::string dir = model_dir("FP4_DEFAULT_MODEL");
  ASSERT_FALSE(dir.empty()) << "FP4_DEFAULT_MODEL must name the built-in model's directory";
  const LoadedModel cpu = load_model({.model_dir = dir, .device = "cpu"});
  const LoadedModel gpu = load_on_gpu(dir);
  auto rng = testing::seeded_rng(81);
  std::vector<EngineRequest> requests;
  for (int64_t length : {5, 130, 700, 1500, 2100, 3000}) {
    EngineRequest r;
    std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(cpu.config.vocab_size - 4));
    for (int64_t i = 0; i < length; ++i) r.prompt.push_back(token(rng));
    r.max_tokens = 24;
    r.sampling.temperature = 0;
    r.sampling.logprobs = 2;  // the best two, for the margin where paths part
    r.ignore_eos = true;
    requests.push_back(r);
  }
  struct Served {
    std::vector<int32_t> tokens;
    std::vector<double> margins;  // best minus runner-up logprob, per step
  };
  auto serve = [&](const LoadedModel& m, bool eager = false) {
    EngineConfig config;
    config.cache = {PageDType::kNVFP4, PageDType::kNVFP4};
    config.num_pages = 256;
    config.max_model_len = 4096;
    config.scheduler = {.max_num_seqs = 8, .max_num_batched_tokens = 1024};
    config.enforce_eager = eager;
    LlmEngine engine(m, config);
    for (size_t i = 0; i < requests.size(); ++i) engine.add_request(static_cast<RequestId>(i), requests[i]);
    std::map<RequestId, Served> tokens;
    while (engine.has_work()) {
      for (const RequestOutput& o : engine.step()) {
        Served& s = tokens[o.id];
        s.tokens.push_back(o.tokens[0].token);
        const auto& top = o.tokens[0].top_logprobs;
        s.margins.push_back(top.size() >= 2 ? top[0].second - top[1].second : INFINITY);
      }
    }
    EXPECT_EQ(engine.metrics().kv_pages_used, 0) << m.backend->name() << ": pages leaked";
    return tokens;
  };
  const auto want = serve(cpu), got = serve(gpu), got_eager = serve(gpu, true);
  for (const auto& [id, g] : got) {
    EXPECT_EQ(g.tokens, got_eager.at(id).tokens) << "request " << id << ": graph and eager steps differ";
  }
  int64_t same = 0;
  for (const auto& [id, w] : want) {
    const std::vector<int32_t>& tokens = w.tokens;
    ASSERT_EQ(got.at(id).tokens.size(), tokens.size());
    size_t i = 0;
    while (i < tokens.size() && tokens[i] == got.at(id).tokens[i]) ++i;
    same += static_cast<int64_t>(i == tokens.size());
    std::printf("[  CHECKED ] request %llu: %zu of %zu tokens agree%s\n", static_cast<unsigned long long>(id), i,
                tokens.size(), i < tokens.size() ? fmt::format(" (CPU margin there {:.3g})", w.margins[i]).c_str() : "");
    // A request may part only at a near-tie: within the NVFP4 budget of 2^-5 of the largest
    // |logit|, which stays under 32 for this model (the Generator comparisons print it), so 1.0.
    if (i < tokens.size()) {
      EXPECT_LE(w.margins[i], 1.0) << "request " << id << " parted at step " << i;
    }
  }
  // Logprobs of the batched steps are not compared here (the Generator comparisons above bound
  // the logits); a request may part at a near-tie, so most, not all, must agree in full.
  EXPECT_GE(same, static_cast<int64_t>(want.size()) - 1);
}

// Sampling on the device against the host sampler on the same logits: one GPU engine samples
// on the GPU, a second, identical one (same kernels, same batches, so the same logits bit for
// bit) with the host sampler. Requests mix greedy and seeded random sampling with top-k, top-p,
// min-p, the three penalties and min_tokens, so the seen-token lists and the banned ids travel
// too. Tokens must be equal; logprobs may differ where the softmax denominator's two summation
// orders round differently: the kernel's bound on log S is (V + 64) 2^-52 (docs/kernels/
// sampler.md), far below one float ulp of a logprob of magnitude >= 2^-10, so within one ulp of
// max(|logprob|, 2^-10), plus that bound.
TEST_F(EngineOnGpu, DeviceSamplingGivesTheHostSamplersTokens) {
  const std::string dir = model_dir("FP4_DEFAULT_MODEL");
  ASSERT_FALSE(dir.empty()) << "FP4_DEFAULT_MODEL must name the built-in model's directory";
  const LoadedModel gpu = load_on_gpu(dir);
  ASSERT_TRUE(gpu.backend->samples_on_device()) << "the GPU backend no longer samples: nothing is compared";
  auto rng = testing::seeded_rng(83);
  std::vector<EngineRequest> requests;
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(gpu.config.vocab_size - 4));
  for (int i = 0; i < 8; ++i) {
    EngineRequest r;
    for (int64_t j = 0, n = 40 + 300 * i; j < n; ++j) r.prompt.push_back(token(rng));
    r.max_tokens = 32;
    r.sampling.logprobs = i % 3 == 0 ? -1 : 5;
    if (i % 2 == 1) {
      r.sampling.temperature = 0.7f + 0.1f * i;
      r.sampling.seed = 1000 + i;
      r.sampling.top_k = i == 3 ? 20 : -1;
      r.sampling.top_p = i == 5 ? 0.9f : 1.0f;
      r.sampling.min_p = i == 7 ? 0.05f : 0.0f;
      r.sampling.repetition_penalty = 1.2f;
      r.sampling.frequency_penalty = 0.3f;
      r.sampling.presence_penalty = -0.2f;
      r.min_tokens = 8;
      r.stop_token_ids = {token(rng), token(rng)};
    } else {
      r.sampling.temperature = 0;
      r.ignore_eos = true;
    }
    requests.push_back(r);
  }
  auto serve = [&](bool on_host) {
    EngineConfig config;
    config.cache = {PageDType::kNVFP4, PageDType::kNVFP4};
    config.num_pages = 256;
    config.max_model_len = 4096;
    config.scheduler = {.max_num_seqs = 8, .max_num_batched_tokens = 1024};
    config.sample_on_host = on_host;
    LlmEngine engine(gpu, config);
    for (size_t i = 0; i < requests.size(); ++i) engine.add_request(static_cast<RequestId>(i), requests[i]);
    std::map<RequestId, std::vector<TokenOutput>> out;
    while (engine.has_work()) {
      for (const RequestOutput& o : engine.step()) out[o.id].push_back(o.tokens.at(0));
    }
    EXPECT_EQ(engine.metrics().kv_pages_used, 0) << "pages leaked";
    return out;
  };
  const auto want = serve(true), got = serve(false);
  auto close = [](float a, float b) {
    const double scale = std::max(std::abs(double(a)), 0x1p-10);
    return std::abs(double(a) - double(b)) <= 0x1p-23 * scale + 0x1p-30;
  };
  int64_t tokens = 0, sampled_tokens = 0, ranks = 0, ranks_differ = 0;
  for (const auto& [id, w] : want) {
    const auto& g = got.at(id);
    ASSERT_EQ(g.size(), w.size()) << "request " << id;
    for (size_t s = 0; s < w.size(); ++s) {
      ASSERT_EQ(g[s].token, w[s].token) << "request " << id << ", step " << s;
      ++tokens;
      sampled_tokens += requests[id].sampling.temperature > 0;
      if (requests[id].sampling.logprobs < 0) continue;
      EXPECT_TRUE(close(g[s].logprob, w[s].logprob)) << id << ", " << s << ": " << g[s].logprob << " vs " << w[s].logprob;
      // The rank counts strictly better logprobs, so it is the host's unless a logprob tied
      // with (or a float ulp from) the token's crossed it: rare, counted below.
      ++ranks;
      ranks_differ += g[s].rank != w[s].rank;
      ASSERT_EQ(g[s].top_logprobs.size(), w[s].top_logprobs.size());
      for (size_t j = 0; j < w[s].top_logprobs.size(); ++j) {
        const auto [wid, wlp] = w[s].top_logprobs[j];
        const auto [gid, glp] = g[s].top_logprobs[j];
        EXPECT_TRUE(close(glp, wlp)) << id << ", " << s << ", top " << j;
        // The order of two alternatives whose logprobs are that close may differ.
        const bool tied = (j > 0 && close(wlp, w[s].top_logprobs[j - 1].second)) ||
                          (j + 1 < w[s].top_logprobs.size() && close(wlp, w[s].top_logprobs[j + 1].second));
        if (!tied) {
          EXPECT_EQ(gid, wid) << id << ", " << s << ", top " << j;
        }
      }
    }
  }
  std::printf("[  CHECKED ] %lld tokens (%lld drawn at random) equal the host sampler's on the same logits; "
              "%lld of %lld ranks differ\n", static_cast<long long>(tokens), static_cast<long long>(sampled_tokens),
              static_cast<long long>(ranks_differ), static_cast<long long>(ranks));
  EXPECT_LE(50 * ranks_differ, ranks) << "more ranks differ than float ties explain";
}

}  // namespace
}  // namespace fp4::engine
