// One forward step of the model over a batch of sequences, written once against the Backend
// interface. A step is any mix of prefill chunks and decode tokens: every new token of every
// sequence is one row, with its absolute position and its sequence's block table. The step
// writes the new tokens' K/V (and index K) into the paged caches, then attends over them.
// The arithmetic of each layer is docs/model.md's. Weights, caches and activations live where
// the backend's ops read them (Buffer); only the step's indices go in and the logits come out.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "backend/buffer.h"
#include "model/config.h"
#include "model/kv_memory.h"
#include "model/model_weights.h"
#include "model/resident_weights.h"

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
  // Everything given must outlive the runner; `resident` holds `weights` where `backend` reads
  // them, and `cache` was allocated from `backend`.
  ModelRunner(const ModelConfig& config, const ModelWeights& weights,
              const ResidentWeights& resident, Backend& backend, KvMemory& cache);

  // Runs the step; returns logits [logit_rows.size(), vocab_size].
  std::vector<float> forward(const StepBatch& batch);

  // The blocks the indexer chose in the last step, per layer ([kv_heads, T, topk] on MSA
  // layers, empty on dense ones), copied to the host. Kept so tests and callers can check that
  // selection is really sparse.
  std::vector<std::vector<int32_t>> last_selection() const;

  const ModelConfig& config() const { return config_; }
  Backend& backend() const { return backend_; }

 private:
  // The batch's indices in the backend's memory.
  struct Step {
    Buffer<int32_t> tokens, positions, seq_of_token, block_tables, logit_rows;
    PagedContext ctx;
  };
  Step upload(const StepBatch& b);

  void attention(int64_t layer, const Step& step, const float* x, float* out);
  void mlp(const MlpWeights& w, const float* x, int64_t rows, float* out);
  void moe(const MoeWeights& w, const float* x, int64_t rows, float* out);
  // The routed experts' outputs y [rows x top_k, hidden], grouped by expert.
  void routed_nvfp4(const MoeWeights& w, const float* x, int64_t rows, const Buffer<int32_t>& offsets,
                    const Buffer<int32_t>& pair_of_row, Buffer<float>& y);
  void routed_f32(const MoeWeights& w, const float* x, int64_t rows, const Buffer<int32_t>& offsets,
                  const Buffer<int32_t>& pair_of_row, Buffer<float>& y);
  void linear(const LinearWeight& w, const float* x, int64_t rows, float* y);
  Buffer<float> floats(int64_t n) { return Buffer<float>(backend_, static_cast<size_t>(n)); }

  const ModelConfig& config_;
  const ModelWeights& weights_;
  Backend& backend_;
  KvMemory& cache_;
  const ResidentWeights& resident_;
  std::vector<Buffer<int32_t>> selection_;
};

}  // namespace fp4::model
