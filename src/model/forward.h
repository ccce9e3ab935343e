// One forward step of the model over a batch of sequences, written once against the Backend
// interface. A step is any mix of prefill chunks and decode tokens: every new token of every
// sequence is one row, with its absolute position and its sequence's block table. The step
// writes the new tokens' K/V (and index K) into the paged caches, then attends over them.
// The arithmetic of each layer is docs/model.md's. Weights, caches and activations live where
// the backend's ops read them (Buffer); only the step's indices go in and the logits come out.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <utility>
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

// Discrete choices a step takes instead of making them, per layer (an empty entry: that layer
// chooses for itself): the routed experts [T, top_k] of an MoE layer and the selected blocks
// [kv_heads, T, topk] of an MSA layer, in last_routes' and last_selection's layouts. A test
// gives one engine another's choices (teacher forcing), so that the two are compared on their
// arithmetic alone: one expert or block chosen differently at a near-tie moves a token further
// than any rounding budget. Routing is forced on backends whose router takes forced ids (the
// CPU reference's).
struct ForcedChoices {
  std::vector<std::vector<int32_t>> routes, selection;
};

class ModelRunner {
 public:
  // Everything given must outlive the runner; `resident` holds `weights` where `backend` reads
  // them, and `cache` was allocated from `backend`.
  ModelRunner(const ModelConfig& config, const ModelWeights& weights,
              const ResidentWeights& resident, Backend& backend, KvMemory& cache);

  // Runs the step; returns logits [logit_rows.size(), vocab_size].
  //
  // Decode steps (one token per sequence, every row's logits wanted, at most kMaxGraphTokens)
  // on a backend that records ops run from a recording (a CUDA graph) per batch size and
  // block-table width; their block tables are padded to a power of two of blocks so that a
  // recording serves many context lengths. The first step of a shape records, the rest replay.
  // The padding applies with graphs off too, so both give the same bits. need_selection: run
  // the step so that last_selection() reports it (never from a recording).
  // forced: choices the step takes instead of its own (never from a recording).
  std::vector<float> forward(const StepBatch& batch, bool need_selection = false,
                             const ForcedChoices* forced = nullptr);
  // The same step with its logits left where the backend computed them: [logit_rows.size(),
  // vocab_size], valid until the next step (for sampling on the device).
  const float* forward_on_device(const StepBatch& batch, bool need_selection = false,
                                 const ForcedChoices* forced = nullptr);

  static constexpr int64_t kMaxGraphTokens = 256;
  // Recordings kept at most; steps of further shapes run op by op. Each holds its inputs and
  // logits, and the memory its ops allocate is the graph's.
  static constexpr int64_t kMaxGraphs = 64;
  // Graphs on (the default) or off (every step launched op by op: --enforce-eager).
  void set_graphs(bool enabled) { graphs_enabled_ = enabled; }
  // Whether decode steps can be recorded: the backend records, and no MoE layer must read its
  // expert sizes on the host (FP32 experts do).
  bool graphs_possible() const { return graph_safe_; }
  int64_t recorded_graphs() const { return static_cast<int64_t>(graphs_.size()); }

  // The blocks the indexer chose in the last step, per layer ([kv_heads, T, topk] on MSA
  // layers, empty on dense ones), copied to the host. Kept so tests and callers can check that
  // selection is really sparse. Steps of the recorded shape keep none unless need_selection.
  std::vector<std::vector<int32_t>> last_selection() const;
  // The experts the router chose in the last step, per layer ([T, top_k] in the router's order
  // on MoE layers, empty on dense ones), copied to the host; kept like last_selection (tests
  // compare two engines' routing, since one expert more or less moves a token far).
  std::vector<std::vector<int32_t>> last_routes() const;

  const ModelConfig& config() const { return config_; }

 private:
  // The batch's indices in the backend's memory.
  struct Step {
    Buffer<int32_t> tokens, positions, seq_of_token, block_tables, logit_rows;
    PagedContext ctx;
  };
  Step upload(const StepBatch& b);
  // The whole step's ops, writing logits [rows, vocab]; no host reads when graph_safe_.
  void run(const Step& step, int64_t rows, float* logits, bool keep_selection,
           const ForcedChoices* forced = nullptr);
  // The step op by op: its indices uploaded, run, its logits in eager_logits_.
  const float* run_eager(const StepBatch& b, bool keep_selection, const ForcedChoices* forced = nullptr);
  // Decode steps: their block tables padded (graph shapes), then recorded or replayed.
  bool graph_shaped(const StepBatch& b) const;
  static StepBatch pad_blocks(const StepBatch& b);
  const float* forward_graph(const StepBatch& b);

  // forced_selection: [kv_heads, T, topk] blocks taken instead of the indexer's, or empty.
  void attention(int64_t layer, const Step& step, const float* x, float* out, bool keep_selection,
                 const std::vector<int32_t>& forced_selection = {});
  void mlp(const MlpWeights& w, const float* x, int64_t rows, float* out);
  // kept_routes, when given, receives the router's expert ids [rows, top_k]; forced_routes,
  // when not empty, are the experts [rows, top_k] the router takes instead of its own.
  void moe(const MoeWeights& w, const float* x, int64_t rows, float* out,
           Buffer<int32_t>* kept_routes = nullptr, const std::vector<int32_t>& forced_routes = {});
  // The routed experts' outputs y [rows x top_k, hidden], grouped by expert.
  void routed_nvfp4(const MoeWeights& w, const float* x, int64_t rows, const Buffer<int32_t>& offsets,
                    const Buffer<int32_t>& pair_of_row, Buffer<float>& y);
  void routed_f32(const MoeWeights& w, const float* x, int64_t rows, const Buffer<int32_t>& offsets,
                  const Buffer<int32_t>& pair_of_row, Buffer<float>& y);
  LinearParams linear_params(const LinearWeight& w, const float* x, int64_t rows, float* y);
  void linear(const LinearWeight& w, const float* x, int64_t rows, float* y);
  Buffer<float> floats(int64_t n) { return Buffer<float>(backend_, static_cast<size_t>(n)); }

  const ModelConfig& config_;
  const ModelWeights& weights_;
  Backend& backend_;
  KvMemory& cache_;
  const ResidentWeights& resident_;
  std::vector<Buffer<int32_t>> selection_;
  std::vector<Buffer<int32_t>> routes_;
  Buffer<float> eager_logits_;  // the last eager step's logits

  // A recorded decode step: its inputs and logits live in these buffers between replays.
  struct Graph {
    Step step;
    Buffer<float> logits;
    std::unique_ptr<CapturedOps> ops;
  };
  bool graph_safe_ = false;
  bool graphs_enabled_ = true;
  std::map<std::pair<int64_t, int64_t>, Graph> graphs_;  // by (tokens, max_blocks)
};

}  // namespace fp4::model
