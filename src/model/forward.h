// One forward step of the model over a batch of sequences, written once against the Backend
// interface. A step is any mix of prefill chunks and decode tokens: every new token of every
// sequence is one row, with its absolute position and its sequence's block table. The step
// writes the new tokens' K/V (and index K) into the paged caches, then attends over them.
// The arithmetic of each layer is docs/model.md's.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "model/config.h"
#include "model/kv_memory.h"
#include "model/model_weights.h"

namespace fp4::model {

struct StepBatch {
  std::vector<int32_t> tokens;        // [T] the new tokens, sequences one after another
  std::vector<int32_t> positions;     // [T] absolute positions
  std::vector<int32_t> seq_of_token;  // [T] index into the block tables
  std::vector<int32_t> block_tables;  // [num_seqs, max_blocks] page ids, -1 beyond the end
  int64_t num_seqs = 0;
  int64_t max_blocks = 0;
  std::vector<int32_t> logit_rows;    // the rows whose next-token logits are wanted
};

class ModelRunner {
 public:
  ModelRunner(const ModelConfig& config, const ModelWeights& weights, Backend& backend,
              KvMemory& cache);

  // Runs the step; returns logits [logit_rows.size(), vocab_size].
  std::vector<float> forward(const StepBatch& batch);

  // The blocks the indexer chose in the last step, per MSA layer: [kv_heads, T, topk].
  // Kept so tests can check that selection is really sparse.
  const std::vector<std::vector<int32_t>>& last_selection() const { return selection_; }

  const ModelConfig& config() const { return config_; }

 private:
  void attention(int64_t layer, const StepBatch& batch, const std::vector<float>& normed,
                 std::vector<float>& out);
  void mlp(const MlpWeights& w, const float* x, int64_t rows, float* out);
  void moe(const MoeWeights& w, const std::vector<float>& x, int64_t rows, std::vector<float>& out);
  std::vector<float> linear(const LinearWeight& w, const float* x, int64_t rows);

  const ModelConfig& config_;
  const ModelWeights& weights_;
  Backend& backend_;
  KvMemory& cache_;
  std::vector<std::vector<int32_t>> selection_;
};

}  // namespace fp4::model
