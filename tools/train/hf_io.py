"""The model in the Hugging Face layout fp4serve loads: config.json (the M3.1-Flash family's
text_config, as `fp4serve init-model` writes it) and model.safetensors under the real
checkpoints' tensor names (`language_model.` prefix), and back.

Stored formats: every Linear, the embedding and the norm weights BF16; the router
(`block_sparse_moe.gate`) and `e_score_correction_bias` F32, as the family keeps them. Reading
also accepts F32 anywhere and ModelOpt NVFP4 Linears (what `fp4serve convert --experts nvfp4`
writes), dequantized exactly.
"""
import json
import os

import torch
from safetensors.torch import load_file, save_file

from tools.train import tokenizer as tok
from tools.train.model import Model, ModelConfig

PREFIX = "language_model."
F32_SUFFIXES = ("block_sparse_moe.gate.weight", "e_score_correction_bias")
# E2M1 code -> value; bit 3 is the sign.
_E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def text_config(cfg):
    """config.json's text_config, key for key what init-model writes (init_model_config.cpp)."""
    eos = [tok.IM_END, tok.ENDOFTEXT]
    flags = lambda v: [int(bool(f)) for f in v]  # noqa: E731
    sparse = {"use_sparse_attention": True, "sparse_index_dim": cfg.index_head_dim,
              "sparse_num_index_heads": cfg.num_kv_heads, "sparse_topk_blocks": cfg.sparse_topk_blocks,
              "sparse_block_size": cfg.sparse_block_size, "sparse_score_type": "max",
              "sparse_init_block": cfg.sparse_init_blocks, "sparse_local_block": cfg.sparse_local_blocks,
              "sparse_attention_freq": flags(cfg.sparse_layers),
              "sparse_disable_index_value": flags(cfg.sparse_layers)}
    return {"hidden_size": cfg.hidden_size, "num_hidden_layers": cfg.num_layers,
            "num_attention_heads": cfg.num_heads, "num_key_value_heads": cfg.num_kv_heads,
            "head_dim": cfg.head_dim, "vocab_size": cfg.vocab_size, "tie_word_embeddings": False,
            "max_position_embeddings": cfg.max_position_embeddings, "rms_norm_eps": cfg.rms_norm_eps,
            "use_gemma_norm": True, "use_qk_norm": True, "qk_norm_type": "per_head",
            "rope_theta": cfg.rope_theta, "rotary_dim": cfg.rotary_dim,
            "partial_rotary_factor": cfg.rotary_dim / cfg.head_dim, "attention_output_gate": False,
            "hidden_act": "swigluoai", "swiglu_alpha": cfg.swiglu_alpha, "swiglu_limit": cfg.swiglu_limit,
            "swiglu_beta": cfg.swiglu_beta, "moe_layer_freq": flags(cfg.moe_layers),
            "dense_intermediate_size": cfg.dense_intermediate_size,
            "intermediate_size": cfg.expert_intermediate_size,
            "shared_intermediate_size": cfg.shared_intermediate_size, "n_shared_experts": 1,
            "num_local_experts": cfg.num_experts, "num_experts_per_tok": cfg.num_experts_per_tok,
            "scoring_func": "sigmoid", "use_routing_bias": True,
            "routed_scaling_factor": cfg.routed_scaling_factor, "bos_token_id": tok.ENDOFTEXT,
            "eos_token_id": eos, "sparse_attention_config": sparse}


def config_json(cfg, provenance):
    eos = [tok.IM_END, tok.ENDOFTEXT]
    return {"architectures": ["MiniMaxM3SparseForConditionalGeneration"], "model_type": "minimax_m3_vl",
            "text_config": text_config(cfg), "tie_word_embeddings": False, "bos_token_id": tok.ENDOFTEXT,
            "eos_token_id": eos, "torch_dtype": "bfloat16", "fp4serve_train": provenance}


def config_from_json(root):
    """ModelConfig of a config.json (flat, or nested under text_config) of this family: Gemma
    norms, QK norm, SwiGLU-OAI, sigmoid routing with bias and a shared expert, MSA."""
    t = root.get("text_config", root)
    for key, want in (("use_gemma_norm", True), ("use_qk_norm", True), ("hidden_act", "swigluoai"),
                      ("tie_word_embeddings", False)):
        if t.get(key, root.get(key)) != want:
            raise ValueError(f"config.json: {key} is {t.get(key)!r}; this model needs {want!r}")
    n = t["num_hidden_layers"]
    sparse = t.get("sparse_attention_config") or {}
    if not sparse.get("use_sparse_attention", False) or sparse.get("sparse_score_type", "max") != "max":
        raise ValueError("config.json: this model needs MSA (sparse_attention_config, max scores)")
    head_dim = t.get("head_dim", t["hidden_size"] // t["num_attention_heads"])
    return ModelConfig(
        hidden_size=t["hidden_size"], num_layers=n, num_heads=t["num_attention_heads"],
        num_kv_heads=t.get("num_key_value_heads", t["num_attention_heads"]), head_dim=head_dim,
        rotary_dim=t.get("rotary_dim") or int(head_dim * t.get("partial_rotary_factor", 1.0)),
        index_head_dim=sparse["sparse_index_dim"],
        moe_layers=[int(bool(f)) for f in t.get("moe_layer_freq", [1] * n)],
        sparse_layers=[int(bool(f)) for f in sparse["sparse_attention_freq"]],
        dense_intermediate_size=t.get("dense_intermediate_size", t.get("intermediate_size")),
        num_experts=t["num_local_experts"], num_experts_per_tok=t["num_experts_per_tok"],
        expert_intermediate_size=t["intermediate_size"],
        shared_intermediate_size=t["shared_intermediate_size"], vocab_size=t["vocab_size"],
        max_position_embeddings=t.get("max_position_embeddings", 32768),
        rms_norm_eps=t.get("rms_norm_eps", 1e-6), rope_theta=t.get("rope_theta", 10000.0),
        swiglu_alpha=t.get("swiglu_alpha", 1.702), swiglu_limit=t.get("swiglu_limit", 7.0),
        swiglu_beta=t.get("swiglu_beta", 1.0), routed_scaling_factor=t.get("routed_scaling_factor", 1.0),
        sparse_topk_blocks=sparse.get("sparse_topk_blocks", 16),
        sparse_block_size=sparse.get("sparse_block_size", 128),
        sparse_init_blocks=sparse.get("sparse_init_block", 0),
        sparse_local_blocks=sparse.get("sparse_local_block", 1))


def _hf_name(name):
    return PREFIX + (name if name.startswith("lm_head.") else "model." + name)


def hf_tensors(model):
    """name -> tensor as stored: the stacked expert weights split per expert, BF16 except the
    router and the selection bias (F32)."""
    out = {}
    for name, t in model.state_dict().items():
        t = t.detach().cpu()
        parts = name.rsplit(".", 1)
        if parts[-1] in ("w1", "w2", "w3"):
            for e in range(t.shape[0]):
                out[_hf_name(f"{parts[0]}.experts.{e}.{parts[1]}.weight")] = t[e].to(torch.bfloat16).contiguous()
            continue
        dtype = torch.float32 if name.endswith(F32_SUFFIXES) else torch.bfloat16
        out[_hf_name(name)] = t.to(dtype).contiguous()
    return out


def write_bf16_dir(model, out_dir, provenance, readme=None, kv_scales=None):
    """A complete BF16 model directory: config.json (written last), model.safetensors,
    tokenizer files, and README.md when given. kv_scales: {layer: (k_scale, v_scale)}, stored
    as F32 scalars `self_attn.k_scale` / `v_scale` (the KV cache's dequantization scales)."""
    os.makedirs(out_dir, exist_ok=True)
    tensors = hf_tensors(model)
    for i, (k, v) in (kv_scales or {}).items():
        tensors[_hf_name(f"layers.{i}.self_attn.k_scale")] = torch.tensor(k, dtype=torch.float32)
        tensors[_hf_name(f"layers.{i}.self_attn.v_scale")] = torch.tensor(v, dtype=torch.float32)
    save_file(tensors, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    tok.write(out_dir, model.cfg.max_position_embeddings)
    if readme:
        with open(os.path.join(out_dir, "README.md"), "w") as f:
            f.write(readme)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config_json(model.cfg, provenance), f, indent=2)
        f.write("\n")


def _dequantize_nvfp4(packed, scales, scale_2):
    """ModelOpt NVFP4: two E2M1 codes per byte (the even column in the low nibble), one E4M3
    scale per 16 values along the row, a global F32 scale. Exact in float64."""
    table = torch.tensor(_E2M1 + [-v for v in _E2M1], dtype=torch.float64)
    codes = torch.stack([packed & 0xF, packed >> 4], dim=-1).flatten(-2).long()
    values = table[codes].unflatten(-1, (-1, 16))
    s = scales.to(torch.float32).to(torch.float64)[..., None]
    return (values * s * float(scale_2.to(torch.float32))).flatten(-2)


def read_tensors(model_dir, nvfp4_names=None):
    """name -> float64 tensor of every weight in the directory's safetensors (NVFP4 decoded);
    the names of the NVFP4 weights are added to the set nvfp4_names when one is given."""
    files = sorted(f for f in os.listdir(model_dir) if f.endswith(".safetensors"))
    raw = {}
    for f in files:
        raw.update(load_file(os.path.join(model_dir, f)))
    out = {}
    for name, t in raw.items():
        base = name[:-len(".weight")] if name.endswith(".weight") else None
        if base and f"{base}.weight_scale_2" in raw:
            out[name] = _dequantize_nvfp4(t, raw[f"{base}.weight_scale"], raw[f"{base}.weight_scale_2"])
            if nvfp4_names is not None:
                nvfp4_names.add(name)
        elif t.is_floating_point() and t.dtype not in (torch.float8_e4m3fn,):
            out[name] = t.to(torch.float64)
    return out


def load_model(model_dir, dtype=torch.float64):
    """The PyTorch model of a model directory, with exactly the stored weights."""
    with open(os.path.join(model_dir, "config.json")) as f:
        root = json.load(f)
    cfg = config_from_json(root)
    prefix = PREFIX if "text_config" in root else ""
    nvfp4 = set()
    tensors = read_tensors(model_dir, nvfp4)
    model = Model(cfg)
    state = {}
    w4a16 = {}  # MoE module -> whether every routed expert weight is NVFP4
    for name in model.state_dict():
        parts = name.rsplit(".", 1)
        if parts[-1] in ("w1", "w2", "w3"):
            keys = [_hf_name(f"{parts[0]}.experts.{e}.{parts[1]}.weight").replace(PREFIX, prefix, 1)
                    for e in range(cfg.num_experts)]
            state[name] = torch.stack([tensors[k] for k in keys])
            w4a16[parts[0]] = w4a16.get(parts[0], True) and all(k in nvfp4 for k in keys)
        else:
            key = _hf_name(name).replace(PREFIX, prefix, 1)
            if key not in tensors:
                raise KeyError(f"{model_dir}: tensor {key} is missing")
            state[name] = tensors[key]
    model.load_state_dict(state)
    # The engine's rule (model_weights.h, w4a16_expert_shapes): its grouped kernel's tiles.
    if cfg.hidden_size % 128 or cfg.expert_intermediate_size % 128:
        w4a16 = {m: False for m in w4a16}
    # NVFP4 experts compute as the engine serves them (W4A16: BF16 activations).
    for module, enabled in w4a16.items():
        model.get_submodule(module).w4a16 = enabled
    return model.to(dtype)
