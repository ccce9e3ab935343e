#include "engine/generator.h"

#include <algorithm>
#include <chrono>
#include <limits>

#include "core/check.h"
#include "core/int_math.h"
#include "engine/device_sampler.h"
#include "sampling/logprobs.h"

namespace fp4::engine {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int64_t pages_for(const GeneratorOptions& o, int64_t max_total_tokens) {
  return o.num_pages > 0 ? o.num_pages : ceil_div(max_total_tokens, int64_t{kvcache::kPageTokens});
}

}  // namespace

Generator::Generator(const LoadedModel& model, GeneratorOptions options, int64_t max_total_tokens)
    : model_(model),
      options_(options),
      memory_(model.config, options.cache, pages_for(options, max_total_tokens), *model.backend),
      runner_(model.config, model.weights, *model.resident, *model.backend, memory_),
      manager_(static_cast<int32_t>(memory_.num_pages()), kvcache::random_prefix_hash_key()) {
  runner_.set_graphs(!options.enforce_eager);
  for (int64_t l = 0; l < model.config.num_layers; ++l) {
    const model::AttentionWeights& a = model.weights.layers[l].attn;
    memory_.layer(l).kv_scales = {a.k_scale, a.v_scale};
  }
}

model::StepBatch Generator::step_for(kvcache::SeqId seq, const std::vector<int32_t>& tokens,
                                     int64_t first_position) const {
  model::StepBatch b;
  b.tokens = tokens;
  for (size_t i = 0; i < tokens.size(); ++i) {
    b.positions.push_back(static_cast<int32_t>(first_position + static_cast<int64_t>(i)));
    b.seq_of_token.push_back(0);
  }
  const auto& pages = manager_.block_table(seq).pages;
  b.num_seqs = 1;
  b.max_blocks = static_cast<int64_t>(pages.size());
  b.block_tables.assign(pages.begin(), pages.end());
  b.logit_rows = {static_cast<int32_t>(tokens.size() - 1)};
  return b;
}

std::vector<std::vector<int32_t>> Generator::last_token_selection(int64_t tokens) const {
  const int64_t heads = model_.config.num_kv_heads, topk = model_.config.sparse_topk_blocks;
  std::vector<std::vector<int32_t>> out;
  for (const std::vector<int32_t>& layer : runner_.last_selection()) {
    std::vector<int32_t>& picked = out.emplace_back();
    if (layer.empty()) continue;  // a dense layer
    FP4_CHECK(static_cast<int64_t>(layer.size()) == heads * tokens * topk,
              "the indexer's selection holds {} ids, not kv_heads {} x tokens {} x topk {}",
              layer.size(), heads, tokens, topk);
    for (int64_t h = 0; h < heads; ++h) {
      const auto first = layer.begin() + (h * tokens + tokens - 1) * topk;  // [heads, tokens, topk]
      picked.insert(picked.end(), first, first + topk);
    }
  }
  return out;
}

std::vector<std::vector<int32_t>> Generator::sorted_routes() const {
  const int64_t k = model_.config.num_experts_per_tok;
  std::vector<std::vector<int32_t>> out = runner_.last_routes();
  for (std::vector<int32_t>& layer : out) {
    FP4_CHECK(k > 0 || layer.empty(), "a model without experts reported routing");
    for (auto it = layer.begin(); it != layer.end(); it += k) std::sort(it, it + k);
  }
  return out;
}

model::ForcedChoices Generator::prompt_choices(const GenerateResult& followed, int64_t first, int64_t n) const {
  const model::ModelConfig& c = model_.config;
  const int64_t k = c.num_experts_per_tok, heads = c.num_kv_heads, topk = c.sparse_topk_blocks;
  model::ForcedChoices f;
  f.routes.resize(static_cast<size_t>(c.num_layers));
  f.selection.resize(static_cast<size_t>(c.num_layers));
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::vector<int32_t>& routes = followed.prompt_routes[l];
    if (!routes.empty()) f.routes[l].assign(routes.begin() + first * k, routes.begin() + (first + n) * k);
    const std::vector<int32_t>& sel = followed.prompt_selections[l];
    if (sel.empty()) continue;
    const int64_t run = static_cast<int64_t>(sel.size()) / (heads * topk);  // [heads, run, topk]
    for (int64_t h = 0; h < heads; ++h) {
      const auto from = sel.begin() + (h * run + first) * topk;
      f.selection[l].insert(f.selection[l].end(), from, from + n * topk);
    }
  }
  return f;
}

model::ForcedChoices Generator::step_choices(const GenerateResult& followed, int64_t step) const {
  // Entry step + 1 of step_routes and step_selections is the step that fed tokens[step].
  model::ForcedChoices f;
  f.routes = followed.step_routes.at(static_cast<size_t>(step + 1));
  f.selection = followed.step_selections.at(static_cast<size_t>(step + 1));
  return f;
}

GenerateResult Generator::generate(const GenerateRequest& r,
                                   const std::function<bool(int32_t)>& on_token) {
  const model::ModelConfig& c = model_.config;
  FP4_CHECK(!r.prompt.empty(), "the prompt has no tokens");
  FP4_CHECK(r.max_tokens >= 1, "max_tokens must be at least 1, got {}", r.max_tokens);
  for (int32_t t : r.prompt) {
    FP4_CHECK(t >= 0 && t < c.vocab_size, "prompt token {} is outside the vocabulary of {}", t,
              c.vocab_size);
  }
  r.sampling.validate();
  const int64_t total = static_cast<int64_t>(r.prompt.size()) + r.max_tokens;
  FP4_CHECK(c.max_position_embeddings == 0 || total <= c.max_position_embeddings,
            "prompt ({} tokens) + max_tokens ({}) = {} exceeds the model's context of {} tokens",
            r.prompt.size(), r.max_tokens, total, c.max_position_embeddings);

  const GenerateResult* follow = r.follow;
  if (follow != nullptr) {
    const size_t steps = follow->tokens.size(), layers = static_cast<size_t>(c.num_layers);
    FP4_CHECK(steps >= 1 && static_cast<int64_t>(steps) <= r.max_tokens && follow->step_routes.size() == steps &&
                  follow->step_selections.size() == steps && follow->prompt_routes.size() == layers &&
                  follow->prompt_selections.size() == layers,
              "the followed run must have kept its choices (keep_selections) for 1 to max_tokens ({}) tokens and "
              "{} layers; it has {} tokens, {} steps' routing, {} steps' selections, {} and {} layers of the "
              "prompt's", r.max_tokens, layers, steps, follow->step_routes.size(), follow->step_selections.size(),
              follow->prompt_routes.size(), follow->prompt_selections.size());
    for (int32_t t : follow->tokens) {
      FP4_CHECK(t >= 0 && t < c.vocab_size, "the followed run's token {} is outside the vocabulary of {}", t,
                c.vocab_size);
    }
  }

  GenerateResult out;
  const kvcache::SeqId seq = next_seq_++;
  const std::optional<int64_t> hit = manager_.add_sequence(seq, r.prompt);
  FP4_CHECK(hit.has_value(), "the KV cache ({} pages) cannot hold a {}-token prompt",
            memory_.num_pages(), r.prompt.size());
  out.cached_prompt_tokens = *hit;
  // Whatever happens below, the sequence's pages go back to the pool.
  struct Release {
    kvcache::KvCacheManager& m;
    kvcache::SeqId s;
    ~Release() { m.free(s); }
  } release{manager_, seq};
  const int64_t prompt_run = static_cast<int64_t>(r.prompt.size()) - *hit;
  if (follow != nullptr) {
    for (int64_t l = 0; l < c.num_layers; ++l) {
      const int64_t routed = static_cast<int64_t>(follow->prompt_routes[l].size());
      const int64_t selected = static_cast<int64_t>(follow->prompt_selections[l].size());
      FP4_CHECK((routed == 0 || routed == prompt_run * c.num_experts_per_tok) &&
                    (selected == 0 || selected == prompt_run * c.num_kv_heads * c.sparse_topk_blocks),
                "layer {}: the followed run's prompt choices ({} expert ids, {} block ids) are not for the {} "
                "prompt tokens this run computes", l, routed, selected, prompt_run);
    }
  }

  std::vector<int32_t> eos(r.stop_token_ids);
  if (!r.ignore_eos) eos.insert(eos.end(), c.eos_token_ids.begin(), c.eos_token_ids.end());
  sampling::TokenCounts counts(c.vocab_size);
  counts.add_prompt(r.prompt);
  const uint64_t seed = sampling::request_seed(r.sampling);

  // Where the backend samples on the device the logits stay there, unless the caller keeps them
  // (or a followed run's tokens are scored on the host).
  const bool on_device = model_.backend->samples_on_device() && !r.keep_logits && follow == nullptr;
  std::vector<float> logits;
  const float* device_logits = nullptr;
  auto forward = [&](const model::StepBatch& b, bool need_selection, const model::ForcedChoices* forced) {
    if (on_device) {
      device_logits = runner_.forward_on_device(b, need_selection, forced);
    } else {
      logits = runner_.forward(b, need_selection, forced);
    }
  };
  // Per layer and KV head, the prompt's selections as the chunks give them ([heads, run, topk]
  // once joined).
  std::vector<std::vector<std::vector<int32_t>>> prompt_selections;

  // Prefill in chunks; the last chunk's final row gives the first token's logits.
  auto start = std::chrono::steady_clock::now();
  for (int64_t pos = *hit; pos < static_cast<int64_t>(r.prompt.size());) {
    const int64_t n = std::min<int64_t>(options_.prefill_chunk,
                                        static_cast<int64_t>(r.prompt.size()) - pos);
    const std::vector<int32_t> chunk(r.prompt.begin() + pos, r.prompt.begin() + pos + n);
    const bool last = pos + n == static_cast<int64_t>(r.prompt.size());
    model::ForcedChoices forced;
    if (follow != nullptr) forced = prompt_choices(*follow, pos - *hit, n);
    forward(step_for(seq, chunk, pos), /*need_selection=*/last || r.keep_selections,
            follow != nullptr ? &forced : nullptr);
    manager_.append(seq, chunk);
    pos += n;
    if (last) out.prompt_selection = last_token_selection(n);
    if (r.keep_selections) {
      const std::vector<std::vector<int32_t>> selection = runner_.last_selection();
      const int64_t heads = c.num_kv_heads;
      prompt_selections.resize(selection.size(), std::vector<std::vector<int32_t>>(static_cast<size_t>(heads)));
      for (size_t l = 0; l < selection.size(); ++l) {
        const int64_t per_head = static_cast<int64_t>(selection[l].size()) / heads;  // [heads, n, topk]
        for (int64_t h = 0; h < heads && per_head > 0; ++h) {
          prompt_selections[l][h].insert(prompt_selections[l][h].end(), selection[l].begin() + h * per_head,
                                         selection[l].begin() + (h + 1) * per_head);
        }
      }
      std::vector<std::vector<int32_t>> routes = sorted_routes();
      out.prompt_routes.resize(routes.size());
      for (size_t l = 0; l < routes.size(); ++l) {
        out.prompt_routes[l].insert(out.prompt_routes[l].end(), routes[l].begin(), routes[l].end());
      }
    }
  }
  if (r.keep_selections) {
    for (const std::vector<std::vector<int32_t>>& layer : prompt_selections) {
      std::vector<int32_t>& joined = out.prompt_selections.emplace_back();
      for (const std::vector<int32_t>& head : layer) joined.insert(joined.end(), head.begin(), head.end());
    }
    out.step_selections.push_back(out.prompt_selection);
    const int64_t k = model_.config.num_experts_per_tok;
    std::vector<std::vector<int32_t>>& first = out.step_routes.emplace_back();
    for (const std::vector<int32_t>& layer : out.prompt_routes) {
      first.emplace_back(layer.empty() ? layer.end() : layer.end() - k, layer.end());
    }
  }
  out.prefill_seconds = seconds_since(start);

  start = std::chrono::steady_clock::now();
  out.finish_reason = "length";
  std::vector<float> masked;
  for (int64_t step = 0; step < r.max_tokens; ++step) {
    // vLLM's min_tokens, as LlmEngine applies it: the tokens that would stop the request cannot
    // be drawn before it. The kept logits stay the model's own.
    const bool ban = step < r.min_tokens && !eos.empty();
    sampling::SampleResult s;
    if (on_device) {
      const DeviceSampleRequest row{&r.sampling, &counts, seed, step,
                                    ban ? std::span<const int32_t>(eos) : std::span<const int32_t>()};
      s = sample_on_device(*model_.backend, device_logits, c.vocab_size, std::span(&row, 1)).at(0);
    } else {
      const std::vector<float>* row = &logits;
      if (ban) {
        masked = logits;
        for (int32_t t : eos) {
          if (t >= 0 && t < c.vocab_size) masked[t] = -std::numeric_limits<float>::infinity();
        }
        row = &masked;
      }
      if (follow != nullptr) {
        s.token = follow->tokens[static_cast<size_t>(step)];  // checked above
        if (r.sampling.logprobs >= 0) sampling::fill_logprobs(*row, r.sampling.logprobs, s);  // as sample() does
      } else {
        s = sampling::sample(*row, r.sampling, counts, seed, step);
      }
      if (r.keep_logits) out.step_logits.insert(out.step_logits.end(), logits.begin(), logits.end());
    }
    out.tokens.push_back(s.token);
    out.logprobs.push_back(s.logprob);
    counts.add_output(s.token);
    const bool stop = std::find(eos.begin(), eos.end(), s.token) != eos.end();
    if (stop) out.finish_reason = "stop";
    const bool followed_all = follow != nullptr && step + 1 == static_cast<int64_t>(follow->tokens.size());
    if ((on_token && !on_token(s.token)) || stop || step + 1 == r.max_tokens || followed_all) break;
    FP4_CHECK(manager_.allocate(seq, 1), "the KV cache ran out of pages at {} tokens",
              manager_.num_tokens(seq));
    const int64_t pos = manager_.num_tokens(seq);
    model::ForcedChoices forced;
    if (follow != nullptr) forced = step_choices(*follow, step);
    forward(step_for(seq, {s.token}, pos), /*need_selection=*/r.keep_selections,
            follow != nullptr ? &forced : nullptr);
    manager_.append(seq, std::span<const int32_t>(&s.token, 1));
    if (r.keep_selections) {
      out.step_selections.push_back(last_token_selection(1));
      out.step_routes.push_back(sorted_routes());
    }
  }
  out.decode_seconds = seconds_since(start);
  return out;
}

}  // namespace fp4::engine
