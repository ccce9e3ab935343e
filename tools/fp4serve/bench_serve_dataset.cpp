#include "tools/fp4serve/bench_serve_dataset.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "core/check.h"
#include "tokenizer/tokenizer.h"

namespace fp4::bench_serve {
namespace {

constexpr int kMaxReencodeRetries = 10;  // vLLM's gen_prompt_decode_to_target_len

void check_ratio(double range_ratio) {
  FP4_CHECK(range_ratio >= 0.0 && range_ratio < 1.0,
            "--random-range-ratio must lie in [0, 1), got {}", range_ratio);
}

int32_t draw(Rng& rng, const std::vector<int32_t>& allowed) {
  return allowed[static_cast<size_t>(rng.uniform_int(0, static_cast<int64_t>(allowed.size()) - 1))];
}

// Decodes `ids` and re-encodes the text until the encoding has `target` ids, cutting or
// extending `ids` between attempts. Returns |final length - target| (0 when it converged).
int64_t fit_text(std::vector<int32_t>& ids, std::string& text, int64_t target,
                 const std::vector<int32_t>& allowed, Rng& rng, const tokenizer::Tokenizer& tok) {
  for (int attempt = 0;; ++attempt) {
    text = tok.decode(ids, /*skip_special_tokens=*/false);
    ids = tok.encode(text, /*add_special_tokens=*/false);
    const auto n = static_cast<int64_t>(ids.size());
    if (n == target) return 0;
    if (attempt == kMaxReencodeRetries) return std::llabs(n - target);
    if (n < target) {
      while (static_cast<int64_t>(ids.size()) < target) ids.push_back(draw(rng, allowed));
    } else {
      ids.resize(static_cast<size_t>(target));
    }
  }
}

}  // namespace

LengthRange input_len_range(int64_t input_len, double range_ratio) {
  check_ratio(range_ratio);
  const auto len = static_cast<double>(input_len);
  return {static_cast<int64_t>(std::floor(len * (1.0 - range_ratio))),
          static_cast<int64_t>(std::ceil(len * (1.0 + range_ratio)))};
}

LengthRange output_len_range(int64_t output_len, double range_ratio) {
  LengthRange r = input_len_range(output_len, range_ratio);
  r.lo = std::max<int64_t>(r.lo, 1);
  r.hi = std::max<int64_t>(r.hi, 1);
  return r;
}

std::vector<int32_t> allowed_ids(int32_t vocab_size, const tokenizer::Tokenizer* tokenizer) {
  std::vector<int32_t> ids;
  if (tokenizer == nullptr) {
    FP4_CHECK(vocab_size >= 1, "--vocab-size must be at least 1, got {}", vocab_size);
    ids.resize(static_cast<size_t>(vocab_size));
    for (int32_t i = 0; i < vocab_size; ++i) ids[static_cast<size_t>(i)] = i;
    return ids;
  }
  for (int32_t i = 0; i < tokenizer->vocab_size(); ++i) {
    if (!tokenizer->is_special(i) && tokenizer->id_to_token(i).has_value()) ids.push_back(i);
  }
  FP4_CHECK(!ids.empty(), "--tokenizer: the tokenizer has no non-special token to draw from");
  return ids;
}

Dataset make_random_dataset(const RandomDatasetSpec& spec, const std::vector<int32_t>& allowed,
                            Rng& rng, const tokenizer::Tokenizer* text_tokenizer) {
  FP4_CHECK(spec.num_prompts >= 1, "--num-prompts must be at least 1, got {}", spec.num_prompts);
  FP4_CHECK(spec.input_len >= 0 && spec.output_len >= 1 && spec.prefix_len >= 0,
            "--random-input-len ({}) and --random-prefix-len ({}) must be >= 0 and "
            "--random-output-len ({}) >= 1", spec.input_len, spec.prefix_len, spec.output_len);
  FP4_CHECK(!allowed.empty(), "no token ids to draw prompts from");
  const LengthRange in = input_len_range(spec.input_len, spec.range_ratio);
  const LengthRange out = output_len_range(spec.output_len, spec.range_ratio);
  FP4_CHECK(spec.prefix_len + in.lo >= 1,
            "every prompt needs at least one token: --random-prefix-len {} + the shortest drawn "
            "input {} (from --random-input-len {} and --random-range-ratio {}) is 0",
            spec.prefix_len, in.lo, spec.input_len, spec.range_ratio);

  const auto n = static_cast<size_t>(spec.num_prompts);
  std::vector<int64_t> input_lens(n), output_lens(n);
  for (auto& len : input_lens) len = rng.uniform_int(in.lo, in.hi);
  for (auto& len : output_lens) len = rng.uniform_int(out.lo, out.hi);

  Dataset data;
  data.prefix.resize(static_cast<size_t>(spec.prefix_len));
  for (auto& id : data.prefix) id = draw(rng, allowed);

  data.prompts.resize(n);
  for (size_t i = 0; i < n; ++i) {
    Prompt& p = data.prompts[i];
    p.ids = data.prefix;
    for (int64_t k = 0; k < input_lens[i]; ++k) p.ids.push_back(draw(rng, allowed));
    p.output_len = output_lens[i];
    p.input_len = static_cast<int64_t>(p.ids.size());
    if (text_tokenizer != nullptr) {
      const int64_t miss = fit_text(p.ids, p.text, p.input_len, allowed, rng, *text_tokenizer);
      if (miss != 0) {
        ++data.length_mismatches;
        data.mismatch_tokens += miss;
      }
      p.input_len = static_cast<int64_t>(p.ids.size());
    }
  }
  return data;
}

}  // namespace fp4::bench_serve
