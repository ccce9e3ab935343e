// Checks of the pre-attention step's params (model_ops.h PreAttentionParams) that every backend
// runs before touching memory, so that bad shapes fail the same way on the CPU and the GPU.
#pragma once

#include "backend/model_ops.h"

namespace fp4 {

// Throws fp4::Error naming the field for: missing inputs, outputs or caches; row strides
// shorter than a row; cache layouts whose heads or head_dim differ from the params'; an index
// layout with V or more than one head, or pages of another size than the K/V pages'; an odd
// rotary_dim or one wider than a head; a non-positive eps; FP8 or NVFP4 scales that are not
// finite and positive; q_out written over q whose rows are not dense.
void check_pre_attention(const PreAttentionParams& p);

// Whether the step has an index branch (a sparse layer).
inline bool has_index_branch(const PreAttentionParams& p) { return p.index_q.x != nullptr; }

}  // namespace fp4
