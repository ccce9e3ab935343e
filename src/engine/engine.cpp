#include "engine/engine.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/check.h"
#include "core/int_math.h"
#include "engine/device_sampler.h"
#include "sampling/sampler.h"

namespace fp4::engine {
namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

int64_t model_len(const LoadedModel& m, int64_t requested) {
  const int64_t context = m.config.max_position_embeddings;
  if (requested <= 0) {
    FP4_CHECK(context > 0, "the model's config has no max_position_embeddings; give max_model_len");
    return context;
  }
  FP4_CHECK(context == 0 || requested <= context,
            "max_model_len {} exceeds the model's context of {} tokens", requested, context);
  return requested;
}

}  // namespace

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kNone: break;
  }
  return nullptr;
}

LlmEngine::LlmEngine(const LoadedModel& model, EngineConfig config)
    : model_(model),
      config_([&] {
        config.max_model_len = model_len(model, config.max_model_len);
        FP4_CHECK(config.num_pages >= 1, "the KV pool needs at least one page, got {}",
                  config.num_pages);
        return config;
      }()),
      memory_(model.config, config_.cache, config_.num_pages, *model.backend),
      runner_(model.config, model.weights, *model.resident, *model.backend, memory_),
      kv_(static_cast<int32_t>(config_.num_pages), kvcache::random_prefix_hash_key()),
      scheduler_(config_.scheduler, kv_) {
  runner_.set_graphs(!config_.enforce_eager);
  for (int64_t l = 0; l < model.config.num_layers; ++l) {
    const model::AttentionWeights& a = model.weights.layers[l].attn;
    memory_.layer(l).kv_scales = {a.k_scale, a.v_scale};
  }
  metrics_.kv_pages_total = config_.num_pages;
}

void LlmEngine::validate(const EngineRequest& r) const {
  const int64_t prompt = std::ssize(r.prompt);
  FP4_CHECK(prompt >= 1, "the prompt has no tokens");
  for (int32_t t : r.prompt) {
    FP4_CHECK(t >= 0 && t < model_.config.vocab_size,
              "prompt token {} is outside the vocabulary [0, {})", t, model_.config.vocab_size);
  }
  FP4_CHECK(r.max_tokens >= 1, "max_tokens must be at least 1, got {}", r.max_tokens);
  FP4_CHECK(r.min_tokens >= 0 && r.min_tokens <= r.max_tokens,
            "min_tokens must be in [0, max_tokens = {}], got {}", r.max_tokens, r.min_tokens);
  FP4_CHECK(prompt + r.max_tokens <= config_.max_model_len,
            "the prompt ({} tokens) plus max_tokens ({}) exceeds max_model_len ({})", prompt,
            r.max_tokens, config_.max_model_len);
  // The longest the request gets in the cache: its last sampled token is never fed back.
  const int64_t pages = kvcache::pages_for_tokens(prompt + r.max_tokens - 1);
  FP4_CHECK(pages <= config_.num_pages,
            "the prompt ({} tokens) plus max_tokens ({}) needs {} KV pages; the pool has {}",
            prompt, r.max_tokens, pages, config_.num_pages);
  for (int32_t t : r.stop_token_ids) {
    FP4_CHECK(t >= 0 && t < model_.config.vocab_size,
              "stop token {} is outside the vocabulary [0, {})", t, model_.config.vocab_size);
  }
  for (const std::string& s : r.stop) FP4_CHECK(!s.empty(), "stop strings must not be empty");
  FP4_CHECK(r.stop.empty() || model_.tokenizer.has_value(),
            "stop strings need a tokenizer, and the model has none");
  r.sampling.validate();
}

void LlmEngine::add_request(RequestId id, EngineRequest r, Clock::time_point arrival) {
  validate(r);
  FP4_CHECK(!requests_.contains(id), "request {} exists already", id);
  const int64_t vocab = model_.config.vocab_size;
  Active a{.request = {}, .counts = sampling::TokenCounts(vocab), .seed = 0, .stop_ids = {},
           .detokenizer = std::nullopt, .text = OutputText(r.stop, r.include_stop_str_in_output),
           .arrival = arrival, .last_token = arrival, .num_output = 0};
  a.counts.add_prompt(r.prompt);
  a.seed = sampling::request_seed(r.sampling);
  a.stop_ids = r.stop_token_ids;
  if (!r.ignore_eos) {
    // An EOS id the vocabulary does not have can never be drawn: it is no stop id (and masking
    // it for min_tokens would write outside the logits).
    for (int64_t e : model_.config.eos_token_ids) {
      if (e >= 0 && e < vocab) a.stop_ids.push_back(static_cast<int32_t>(e));
    }
    if (model_.tokenizer && model_.tokenizer->eos_id() >= 0 && model_.tokenizer->eos_id() < vocab) {
      a.stop_ids.push_back(model_.tokenizer->eos_id());
    }
  }
  if (model_.tokenizer) a.detokenizer.emplace(*model_.tokenizer, r.skip_special_tokens);
  scheduler_.add(id, r.prompt);
  a.request = std::move(r);
  requests_.emplace(id, std::move(a));
  update_gauges();
}

std::optional<RequestOutput> LlmEngine::abort(RequestId id) {
  const auto it = requests_.find(id);
  if (it == requests_.end()) return std::nullopt;
  RequestOutput out;
  out.id = id;
  out.finish_reason = FinishReason::kAbort;
  finish(id, it->second, out);
  return out;
}

model::StepBatch LlmEngine::build_batch(const scheduler::SchedulerOutput& out) const {
  model::StepBatch b;
  b.num_seqs = std::ssize(out.chunks);
  for (const scheduler::ScheduledChunk& c : out.chunks) {
    b.max_blocks = std::max<int64_t>(b.max_blocks, std::ssize(kv_.block_table(c.id).pages));
  }
  b.block_tables.assign(b.num_seqs * b.max_blocks, -1);
  for (int64_t s = 0; s < b.num_seqs; ++s) {
    const scheduler::ScheduledChunk& c = out.chunks[s];
    const auto& pages = kv_.block_table(c.id).pages;
    std::copy(pages.begin(), pages.end(), b.block_tables.begin() + s * b.max_blocks);
    const std::vector<int32_t>& tokens = scheduler_.get(c.id).tokens;
    for (int64_t p = c.start; p < c.start + c.count; ++p) {
      b.tokens.push_back(tokens[p]);
      b.positions.push_back(static_cast<int32_t>(p));
      b.seq_of_token.push_back(static_cast<int32_t>(s));
    }
    if (c.samples) b.logit_rows.push_back(static_cast<int32_t>(b.tokens.size() - 1));
  }
  return b;
}

std::vector<RequestOutput> LlmEngine::step() {
  const scheduler::SchedulerOutput out = scheduler_.schedule();
  if (out.empty()) {
    update_gauges();
    return {};
  }
  const model::StepBatch batch = build_batch(out);
  const int64_t vocab = model_.config.vocab_size;
  std::vector<RequestId> sampled_ids;
  for (const scheduler::ScheduledChunk& c : out.chunks) {
    if (c.samples) sampled_ids.push_back(c.id);
  }
  // vLLM's min_tokens: the tokens that would stop a request cannot be drawn before it.
  auto banned = [&](const Active& a) {
    return a.num_output < a.request.min_tokens ? std::span<const int32_t>(a.stop_ids) : std::span<const int32_t>();
  };
  // Where the backend samples, the logits stay on it; only the tokens come back.
  const bool on_device = model_.backend->samples_on_device() && !config_.sample_on_host;
  const float* device_logits = nullptr;
  std::vector<float> logits;
  if (on_device) {
    device_logits = runner_.forward_on_device(batch);
  } else {
    logits = runner_.forward(batch);
  }
  scheduler_.on_step_done(out);
  ++metrics_.steps;

  std::vector<sampling::SampleResult> samples;
  if (on_device) {
    std::vector<DeviceSampleRequest> rows;
    for (RequestId id : sampled_ids) {
      const Active& a = requests_.at(id);
      rows.push_back({&a.request.sampling, &a.counts, a.seed, a.num_output, banned(a)});
    }
    samples = sample_on_device(*model_.backend, device_logits, vocab, rows);
  } else {
    std::vector<sampling::SampleRequest> rows;
    for (size_t i = 0; i < sampled_ids.size(); ++i) {
      const Active& a = requests_.at(sampled_ids[i]);
      for (int32_t t : banned(a)) logits[i * vocab + t] = -std::numeric_limits<float>::infinity();
      rows.push_back({&a.request.sampling, &a.counts, a.seed, a.num_output});
    }
    samples = sampling::sample_batch(logits, vocab, rows);
  }

  std::vector<RequestOutput> outputs;
  for (size_t i = 0; i < sampled_ids.size(); ++i) {
    const RequestId id = sampled_ids[i];
    outputs.push_back(on_token(id, requests_.at(id), samples[i]));
  }
  update_gauges();
  return outputs;
}

RequestOutput LlmEngine::on_token(RequestId id, Active& a, const sampling::SampleResult& s) {
  const Clock::time_point now = Clock::now();
  if (a.num_output == 0) {
    metrics_.time_to_first_token.observe(seconds(now - a.arrival));
    metrics_.prompt_tokens += std::ssize(a.request.prompt);
  } else {
    metrics_.inter_token_latency.observe(seconds(now - a.last_token));
  }
  a.last_token = now;
  ++a.num_output;
  ++metrics_.generation_tokens;
  a.counts.add_output(s.token);
  scheduler_.append_token(id, s.token);

  RequestOutput out;
  out.id = id;
  out.tokens.push_back({s.token, s.logprob, s.rank, s.top_logprobs});
  const bool min_reached = a.num_output >= a.request.min_tokens;
  const bool stop_token = min_reached && std::find(a.stop_ids.begin(), a.stop_ids.end(),
                                                   s.token) != a.stop_ids.end();
  if (stop_token) {
    out.finish_reason = FinishReason::kStop;
    const bool is_eos = std::find(a.request.stop_token_ids.begin(), a.request.stop_token_ids.end(),
                                  s.token) == a.request.stop_token_ids.end();
    if (!is_eos) out.stop_token = s.token;
  } else if (a.detokenizer) {
    // The text of a token that stops the request is not part of the output.
    std::optional<std::string> stop = a.text.add(a.detokenizer->push(s.token), min_reached);
    if (stop) {
      out.finish_reason = FinishReason::kStop;
      out.stop_string = std::move(stop);
    }
  }
  const int64_t total = scheduler_.get(id).tokens.size();
  if (!out.finished() && (a.num_output >= a.request.max_tokens || total >= config_.max_model_len)) {
    out.finish_reason = FinishReason::kLength;
  }
  if (out.finished()) {
    finish(id, a, out);
  } else {
    out.text = a.text.take(false);
    out.prompt_tokens = std::ssize(a.request.prompt);
    out.cached_prompt_tokens = std::max<int64_t>(0, scheduler_.get(id).cached_prompt_tokens);
    out.output_tokens = a.num_output;
  }
  return out;
}

void LlmEngine::finish(RequestId id, Active& a, RequestOutput& out) {
  if (a.detokenizer && out.finish_reason != FinishReason::kStop) {
    // Length or abort: whatever the detokenizer still holds is text of the output, and may
    // complete a stop string.
    std::optional<std::string> stop =
        a.text.add(a.detokenizer->finish(), a.num_output >= a.request.min_tokens);
    if (stop && out.finish_reason == FinishReason::kLength) {
      out.finish_reason = FinishReason::kStop;
      out.stop_string = std::move(stop);
    }
  }
  out.text += a.text.take(true);
  out.prompt_tokens = std::ssize(a.request.prompt);
  out.cached_prompt_tokens = std::max<int64_t>(0, scheduler_.get(id).cached_prompt_tokens);
  out.output_tokens = a.num_output;
  metrics_.e2e_request_latency.observe(seconds(Clock::now() - a.arrival));
  switch (out.finish_reason) {
    case FinishReason::kStop: ++metrics_.requests_finished_stop; break;
    case FinishReason::kLength: ++metrics_.requests_finished_length; break;
    default: ++metrics_.requests_finished_abort; break;
  }
  scheduler_.remove(id);
  requests_.erase(id);
  update_gauges();
}

void LlmEngine::update_gauges() {
  metrics_.num_running = scheduler_.num_running();
  metrics_.num_waiting = scheduler_.num_waiting();
  metrics_.kv_pages_used = kv_.pool().num_used();
  metrics_.prefix_cache_queries = kv_.stats().queries;
  metrics_.prefix_cache_hits = kv_.stats().hits;
  metrics_.num_preemptions = scheduler_.total_preemptions();
}

}  // namespace fp4::engine
