// Decode steps from recordings (CUDA graphs): one per (batch size, padded block-table width).
#include <bit>

#include "core/check.h"
#include "model/forward.h"

namespace fp4::model {

bool ModelRunner::graph_shaped(const StepBatch& b) const {
  const int64_t t = static_cast<int64_t>(b.tokens.size());
  if (!graph_safe_ || t > kMaxGraphTokens || b.num_seqs != t || std::ssize(b.logit_rows) != t) return false;
  for (int64_t i = 0; i < t; ++i) {
    if (b.seq_of_token[i] != i || b.logit_rows[i] != i) return false;
  }
  return true;
}

// Block tables padded with -1 to a power of two of blocks: the width is part of a recording's
// shape (the kernels' strides and split plans), so padding lets one recording serve contexts
// up to twice as long as the one it was made at.
StepBatch ModelRunner::pad_blocks(const StepBatch& b) {
  const int64_t width = static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(std::max<int64_t>(b.max_blocks, 1))));
  if (width == b.max_blocks) return b;
  StepBatch p = b;
  p.max_blocks = width;
  p.block_tables.assign(static_cast<size_t>(b.num_seqs * width), -1);
  for (int64_t s = 0; s < b.num_seqs; ++s) {
    std::copy_n(b.block_tables.begin() + s * b.max_blocks, b.max_blocks, p.block_tables.begin() + s * width);
  }
  return p;
}

const float* ModelRunner::forward_graph(const StepBatch& b) {
  const int64_t t = static_cast<int64_t>(b.tokens.size());
  const std::pair<int64_t, int64_t> shape{t, b.max_blocks};
  auto it = graphs_.find(shape);
  // Graphs off, or no room for another recording: this step runs op by op.
  if (!graphs_enabled_ || (it == graphs_.end() && static_cast<int64_t>(graphs_.size()) >= kMaxGraphs)) {
    return run_eager(b, false);
  }
  if (it == graphs_.end()) {
    Graph g{.step = upload(b), .logits = floats(t * config_.vocab_size), .ops = nullptr};
    backend_.begin_capture();
    try {
      run(g.step, t, g.logits.data(), false);
    } catch (...) {
      backend_.abort_capture();
      throw;
    }
    g.ops = backend_.end_capture();
    it = graphs_.emplace(shape, std::move(g)).first;
  } else {
    Step& s = it->second.step;
    s.tokens.upload(b.tokens);
    s.positions.upload(b.positions);
    s.seq_of_token.upload(b.seq_of_token);
    s.block_tables.upload(b.block_tables);
    s.logit_rows.upload(b.logit_rows);
  }
  it->second.ops->replay();
  return it->second.logits.data();
}

}  // namespace fp4::model
