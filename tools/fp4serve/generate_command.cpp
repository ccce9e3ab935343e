// `fp4serve generate`: one prompt, offline. stdout gets exactly the generated text (or, with
// --json, one JSON object); statistics go to stderr so they never mix with the text.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdio>
#include <fstream>
#include <optional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "backend/profiling_backend.h"
#include "core/check.h"
#include "core/thread_pool.h"
#include "engine/generator.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tools/fp4serve/commands.h"

namespace fp4::cli {
namespace {

struct GenerateFlags {
  std::string model;
  std::string prompt;
  bool prompt_given = false;
  std::string prompt_ids;
  std::string prompt_ids_file;
  int64_t max_tokens = 128;
  int64_t min_tokens = 0;
  sampling::SamplingParams sampling;
  int64_t seed = -1;
  bool ignore_eos = false;
  std::string kv_cache_dtype = "auto";
  std::string index_cache_dtype = "auto";
  std::string index_query_dtype = "fp32";
  std::string attention_operands = "fp32";
  int threads = 0;
  bool json = false;
  std::string dump_logits;
  std::string dump_selection;
  bool progress = false;
  std::string device = "auto";
  bool enforce_eager = false;
  std::string prefill_attention = "dense";
  std::string mxfp8_weights = "auto";
  bool profile_ops = false;
};

// The ops' time, longest total first: where a generation spent its prefill and decode.
void print_op_profile(const ProfilingBackend& profile) {
  const std::vector<ProfilingBackend::OpTime> ops = profile.totals();
  double total = 0;
  for (const auto& t : ops) total += t.ms;
  fmt::print(stderr, "\n[fp4serve] time per op ({}; every op timed from a mark before it to one after, run "
             "op by op):\n{:<18} {:>8} {:>12} {:>7} {:>11}\n", profile.name(), "op", "calls", "total ms", "share",
             "mean us");
  for (const auto& t : ops) {
    fmt::print(stderr, "{:<18} {:>8} {:>12.3f} {:>6.1f}% {:>11.2f}\n", t.op, t.calls, t.ms,
               total > 0 ? 100.0 * t.ms / total : 0.0, 1000.0 * t.ms / static_cast<double>(t.calls));
  }
}

std::vector<int32_t> parse_ids(const std::string& text, const std::string& what) {
  std::string spaced = text;
  for (char& ch : spaced) ch = ch == ',' ? ' ' : ch;
  std::istringstream in(spaced);
  std::vector<int32_t> ids;
  std::string word;
  while (in >> word) {
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(word, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    FP4_CHECK(used == word.size() && v >= 0 && v <= INT32_MAX, "{}: '{}' is not a token id", what,
              word);
    ids.push_back(static_cast<int32_t>(v));
  }
  return ids;
}

std::vector<int32_t> prompt_tokens(const GenerateFlags& f, const engine::LoadedModel& m) {
  const int sources = f.prompt_given + !f.prompt_ids.empty() + !f.prompt_ids_file.empty();
  FP4_CHECK(sources == 1, "give exactly one of --prompt, --prompt-ids, --prompt-ids-file");
  if (!f.prompt_ids.empty()) return parse_ids(f.prompt_ids, "--prompt-ids");
  if (!f.prompt_ids_file.empty()) {
    std::ifstream in(f.prompt_ids_file);
    FP4_CHECK(in.good(), "--prompt-ids-file {}: cannot read it", f.prompt_ids_file);
    std::ostringstream text;
    text << in.rdbuf();
    return parse_ids(text.str(), f.prompt_ids_file);
  }
  FP4_CHECK(m.tokenizer.has_value(), "--prompt needs {}/tokenizer.json; give --prompt-ids "
            "instead", f.model);
  std::vector<int32_t> ids = m.tokenizer->encode(f.prompt, /*add_special_tokens=*/true);
  // An empty prompt still needs one token to condition on: the beginning of the sequence.
  if (ids.empty()) {
    const int64_t bos = m.tokenizer->bos_id() >= 0 ? m.tokenizer->bos_id() : m.config.bos_token_id;
    FP4_CHECK(bos >= 0, "the prompt is empty and the model has no beginning-of-sequence token");
    ids.push_back(static_cast<int32_t>(bos));
  }
  return ids;
}

void run_generate(const GenerateFlags& f) {
  set_default_num_threads(f.threads);
  // One sequence decodes at a time.
  engine::LoadOptions load{.model_dir = f.model, .progress = f.progress, .device = f.device,
                           .prefill_attention = f.prefill_attention, .mxfp8_weights = f.mxfp8_weights,
                           .max_decode_batch = 1};
  engine::LoadedModel m = engine::load_model(load);
  // Profiling wraps the backend the weights were placed on; they stay where they are.
  const ProfilingBackend* profile = nullptr;
  if (f.profile_ops) {
    auto wrapped = std::make_unique<ProfilingBackend>(std::move(m.backend));
    profile = wrapped.get();
    m.backend = std::move(wrapped);
  }
  engine::GenerateRequest req;
  req.prompt = prompt_tokens(f, m);
  req.max_tokens = f.max_tokens;
  req.min_tokens = f.min_tokens;
  req.sampling = f.sampling;
  if (f.seed >= 0) req.sampling.seed = static_cast<uint64_t>(f.seed);
  req.ignore_eos = f.ignore_eos;
  req.keep_logits = !f.dump_logits.empty();
  // The JSON output reports each sampled token's logprob.
  if (f.json && req.sampling.logprobs < 0) req.sampling.logprobs = 0;
  // The tokenizer's EOS ends generation like the config's, unless told to ignore both.
  if (!f.ignore_eos && m.tokenizer && m.tokenizer->eos_id() >= 0) {
    req.stop_token_ids.push_back(m.tokenizer->eos_id());
  }

  // Checked before the cache is sized from these numbers.
  FP4_CHECK(f.max_tokens >= 1, "--max-tokens must be at least 1, got {}", f.max_tokens);
  const int64_t total = static_cast<int64_t>(req.prompt.size()) + f.max_tokens;
  FP4_CHECK(m.config.max_position_embeddings == 0 || total <= m.config.max_position_embeddings,
            "the prompt ({} tokens) + --max-tokens ({}) = {} exceeds the model's context of {} "
            "tokens", req.prompt.size(), f.max_tokens, total, m.config.max_position_embeddings);

  engine::GeneratorOptions options;
  options.cache = engine::cache_formats(f.kv_cache_dtype, f.index_cache_dtype, f.index_query_dtype,
                                        f.attention_operands);
  options.enforce_eager = f.enforce_eager;
  engine::Generator generator(m, options,
                              static_cast<int64_t>(req.prompt.size()) + req.max_tokens);
  // Plain output streams: each token's text is printed as soon as no later token can change it.
  std::optional<tokenizer::IncrementalDetokenizer> stream;
  if (!f.json && m.tokenizer) stream.emplace(*m.tokenizer, /*skip_special_tokens=*/true);
  const engine::GenerateResult r = generator.generate(req, [&](int32_t id) {
    if (stream) {
      fmt::print("{}", stream->push(id));
      std::fflush(stdout);
    }
    return true;
  });
  if (stream) fmt::print("{}", stream->finish());

  const std::string text =
      m.tokenizer ? m.tokenizer->decode(r.tokens, /*skip_special_tokens=*/true) : std::string();
  if (!f.dump_logits.empty()) {
    std::ofstream out(f.dump_logits, std::ios::binary);
    out.write(reinterpret_cast<const char*>(r.step_logits.data()),
              static_cast<std::streamsize>(r.step_logits.size() * sizeof(float)));
    FP4_CHECK(out.good(), "--dump-logits {}: cannot write it", f.dump_logits);
  }
  if (!f.dump_selection.empty()) {
    nlohmann::json layers = nlohmann::json::array();
    for (const std::vector<int32_t>& picked : r.prompt_selection) {
      nlohmann::json heads = nlohmann::json::array();
      const int64_t topk = m.config.sparse_topk_blocks;
      for (size_t i = 0; topk > 0 && i < picked.size(); i += static_cast<size_t>(topk)) {
        heads.push_back(std::vector<int32_t>(picked.begin() + static_cast<std::ptrdiff_t>(i),
                                             picked.begin() + static_cast<std::ptrdiff_t>(i) + topk));
      }
      layers.push_back(picked.empty() ? nlohmann::json(nullptr) : heads);
    }
    std::ofstream out(f.dump_selection);
    out << nlohmann::json{{"prompt_tokens", req.prompt.size()},
                          {"block_size", m.config.sparse_block_size},
                          {"topk", m.config.sparse_topk_blocks},
                          {"layers", layers}}.dump() << "\n";
    FP4_CHECK(out.good(), "--dump-selection {}: cannot write it", f.dump_selection);
  }
  const double prefill_tps = static_cast<double>(req.prompt.size() - r.cached_prompt_tokens) /
                             std::max(r.prefill_seconds, 1e-9);
  // The first token comes from the prefill; the decode rate counts the steps after it.
  const double decode_tps =
      static_cast<double>(r.tokens.size() > 0 ? r.tokens.size() - 1 : 0) /
      std::max(r.decode_seconds, 1e-9);
  if (f.json) {
    nlohmann::json j = {{"text", text},
                        {"token_ids", r.tokens},
                        {"logprobs", r.logprobs},
                        {"prompt_tokens", req.prompt.size()},
                        {"completion_tokens", r.tokens.size()},
                        {"cached_prompt_tokens", r.cached_prompt_tokens},
                        {"finish_reason", r.finish_reason},
                        {"prefill_tokens_per_s", prefill_tps},
                        {"decode_tokens_per_s", decode_tps}};
    fmt::print("{}\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  } else if (!m.tokenizer) {
    fmt::print("{}", fmt::join(r.tokens, " "));  // no tokenizer.json: the ids are the output
  }
  std::fflush(stdout);
  fmt::print(stderr,
             "\n[fp4serve] {} prompt + {} generated tokens ({}), kv cache {}, index cache {}, {} "
             "| load {:.2f} s | prefill {:.1f} tok/s | decode {:.1f} tok/s\n",
             req.prompt.size(), r.tokens.size(), r.finish_reason,
             kvcache::page_dtype_name(options.cache.kv), kvcache::page_dtype_name(options.cache.index),
             m.backend->uses_host_memory()
                 ? fmt::format("{} threads", default_num_threads())
                 : fmt::format("{}, {}", m.backend->name(),
                               generator.runner().graphs_possible() && !f.enforce_eager ? "CUDA graphs" : "eager"),
             m.load_seconds, prefill_tps, decode_tps);
  if (profile != nullptr) print_op_profile(*profile);
}

}  // namespace

void add_generate_command(CLI::App& app, int& exit_code) {
  auto flags = std::make_shared<GenerateFlags>();
  CLI::App* sub = app.add_subcommand("generate", "Generate text from a prompt, offline");
  sub->add_option("--model", flags->model, "Model directory (config.json, safetensors)")->required();
  sub->add_option("--prompt", flags->prompt, "Prompt text (tokenized with the model's tokenizer)");
  sub->add_option("--prompt-ids", flags->prompt_ids, "Prompt as token ids, comma-separated");
  sub->add_option("--prompt-ids-file", flags->prompt_ids_file,
                  "File of whitespace-separated prompt token ids");
  sub->add_option("--max-tokens", flags->max_tokens, "Tokens to generate")->capture_default_str();
  sub->add_option("--min-tokens", flags->min_tokens, "Tokens before EOS may stop generation");
  sub->add_option("--temperature", flags->sampling.temperature, "0 = greedy")->capture_default_str();
  sub->add_option("--top-p", flags->sampling.top_p, "Nucleus sampling mass");
  sub->add_option("--top-k", flags->sampling.top_k, "Keep the k most likely tokens (-1: off)");
  sub->add_option("--min-p", flags->sampling.min_p, "Drop tokens below min_p x the top probability");
  sub->add_option("--repetition-penalty", flags->sampling.repetition_penalty, "");
  sub->add_option("--frequency-penalty", flags->sampling.frequency_penalty, "");
  sub->add_option("--presence-penalty", flags->sampling.presence_penalty, "");
  sub->add_option("--seed", flags->seed, "Seed of the sampling stream (default: random)");
  sub->add_flag("--ignore-eos", flags->ignore_eos, "Keep generating after end-of-sequence tokens");
  sub->add_option("--kv-cache-dtype", flags->kv_cache_dtype, "auto, bf16, fp8, nvfp4")
      ->capture_default_str();
  sub->add_option("--index-cache-dtype", flags->index_cache_dtype,
                  "MSA index-key cache: auto (= --kv-cache-dtype), bf16, fp8, nvfp4")
      ->capture_default_str();
  sub->add_option("--index-query-dtype", flags->index_query_dtype,
                  "MSA indexer query: fp32, or rounded per head to fp8 (one E4M3 value) or fp8x2 (two)")
      ->capture_default_str()->check(CLI::IsMember({"fp32", "fp8", "fp8x2"}));
  sub->add_option("--attention-operands", flags->attention_operands,
                  "Attention's Q and softmax weights: fp32, or rounded to 16 bits (FP16 for fp8 and nvfp4 caches, BF16 otherwise)")
      ->capture_default_str()->check(CLI::IsMember({"fp32", "16bit"}));
  sub->add_option("--threads", flags->threads, "CPU threads (default: all cores)");
  sub->add_flag("--json", flags->json, "Print one JSON object (text, token ids, logprobs, stats)");
  sub->add_option("--dump-logits", flags->dump_logits,
                  "Write every sampled step's logits as float32 [tokens, vocab]");
  sub->add_option("--dump-selection", flags->dump_selection,
                  "Write, as JSON, the blocks the MSA indexer chose for the prompt's last token "
                  "(per layer, per KV head; null for dense layers)");
  sub->add_flag("--progress", flags->progress, "Show the loading progress bar even when piped");
  sub->add_option("--device", flags->device, "auto (the GPU when one is visible), cuda, cpu")
      ->capture_default_str()->check(CLI::IsMember({"auto", "cuda", "cpu"}));
  sub->add_flag("--enforce-eager", flags->enforce_eager, "Launch decode steps op by op instead of from recorded CUDA graphs");
  sub->add_option("--prefill-attention", flags->prefill_attention,
                  "Where prompt chunks take the GPU's prefill attention kernel: dense layers, all "
                  "layers, or never (the decode kernel per token)")
      ->capture_default_str()->check(CLI::IsMember({"dense", "all", "never"}));
  sub->add_option("--mxfp8-weights", flags->mxfp8_weights,
                  "How a GPU holds projections stored in MXFP8: mxfp8, bf16, or auto (mxfp8 for "
                  "decode batches of up to 16)")
      ->capture_default_str()->check(CLI::IsMember({"auto", "mxfp8", "bf16"}));
  sub->add_flag("--profile-ops", flags->profile_ops,
                "Time every op (run op by op) and print the time per op to stderr after the run");
  sub->callback([flags, &exit_code, sub] {
    flags->prompt_given = sub->count("--prompt") > 0;
    run_generate(*flags);
    exit_code = 0;
  });
}

}  // namespace fp4::cli
