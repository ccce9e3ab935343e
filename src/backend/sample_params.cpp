#include "backend/sample_params.h"

#include "core/check.h"

namespace fp4 {

void check_sample_params(const SampleParams& p) {
  // 2^23 keeps a row's summed token weights (each at most 2^40) below 2^63; 2^31 rows is the
  // grid's limit of one block per row.
  FP4_CHECK(p.vocab > 0 && p.vocab <= (int64_t{1} << 23), "sample: vocab {} must be in [1, 2^23]", p.vocab);
  FP4_CHECK(p.rows >= 0 && p.rows < (int64_t{1} << 31), "sample: rows {} must be in [0, 2^31)", p.rows);
  if (p.rows == 0) return;
  FP4_CHECK(p.logits != nullptr, "sample: logits is required");
  FP4_CHECK(p.row != nullptr, "sample: row (the per-row requests) is required");
  FP4_CHECK(p.scratch != nullptr, "sample: scratch ([rows, vocab] floats) is required");
  FP4_CHECK(p.scratch != p.logits, "sample: scratch must not alias logits, which are not modified");
  FP4_CHECK(p.token != nullptr && p.logprob != nullptr && p.rank != nullptr && p.top_ids != nullptr &&
                p.top_logprobs != nullptr,
            "sample: every output (token, logprob, rank, top_ids, top_logprobs) is required");
}

}  // namespace fp4
