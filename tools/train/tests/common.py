"""Shared pieces of the tests: import paths, the fp4serve binary, small random models."""
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
for path in (REPO, os.path.join(REPO, "tests", "reference"), os.path.join(REPO, "tests", "model")):
    if path not in sys.path:
        sys.path.insert(0, path)

import torch  # noqa: E402

from tools.train.binary import find_fp4serve  # noqa: E402
from tools.train.model import Model, ModelConfig  # noqa: E402

# The tests run beside compilations on small machines: one thread is the fastest there.
torch.set_num_threads(1)


def fp4serve_binary():
    """FP4SERVE or binary.find_fp4serve's choice ($FP4_BUILD_DIR's or build/'s), or None."""
    try:
        return find_fp4serve(os.environ.get("FP4SERVE"))
    except FileNotFoundError:
        return None


def tiny_config(**kw):
    """Three layers (a dense MLP, then MoE), MSA in all, 2-block selection so that a prompt of a
    few hundred tokens already drops blocks."""
    base = dict(hidden_size=64, num_layers=3, num_heads=4, num_kv_heads=2, head_dim=16, rotary_dim=8,
                index_head_dim=16, moe_layers=[0, 1, 1], sparse_layers=[1, 1, 1], dense_intermediate_size=96,
                num_experts=8, num_experts_per_tok=2, expert_intermediate_size=32,
                shared_intermediate_size=32, max_position_embeddings=2048, sparse_topk_blocks=2)
    base.update(kw)
    return ModelConfig(**base)


def random_model(cfg, seed):
    """float64 weights that make every part matter: Linears N(0, 1/fan_in) (gate/up 3x larger,
    so SwiGLU-OAI's clamp at 7 is reached), norm weights N(0, 0.1) around Gemma's 0, router
    N(0, 1/H), selection bias N(0, 0.5); rounded to what the export stores (BF16, the router
    and bias F32), so the exported checkpoint holds exactly these numbers."""
    gen = torch.Generator().manual_seed(seed)
    model = Model(cfg).double()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(0.1 * torch.randn(p.shape, generator=gen, dtype=torch.float64))
            else:
                gain = 3.0 if name.endswith(("gate_proj.weight", "up_proj.weight", "w1", "w3")) else 1.0
                p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64) * gain / np.sqrt(p.shape[-1]))
            stored = torch.float32 if "block_sparse_moe.gate" in name else torch.bfloat16
            p.copy_(p.to(stored).to(torch.float64))
        for moe in model.moe_layers():
            moe.e_score_correction_bias.copy_(
                (0.5 * torch.randn(cfg.num_experts, generator=gen, dtype=torch.float64)).float().double())
    return model
