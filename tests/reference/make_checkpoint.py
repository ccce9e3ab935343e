#!/usr/bin/env python3
"""Writes a small synthetic checkpoint in the Hugging Face layout of the MiniMax-M3 family.

    make_checkpoint.py --preset {tiny-m3,tiny-m3.1-flash,tiny-dense}
                       --weights {bf16,mxfp8,nvfp4-experts,m3.1} [--seed N] [--shards 2] --out DIR

Presets (H=128, 4 layers, 8 query / 2 KV heads of 32, index dim 32, vocab 512):
  tiny-m3          nested text_config ("language_model." tensor names), layer 0 dense attention +
                   dense MLP (256), layers 1-3 MSA + MoE (8 experts, top 2, 64 wide, shared 64)
  tiny-m3.1-flash  the same with MSA in every layer
  tiny-dense       flat config (no prefix), tied embeddings, dense MLP (256), no MSA
All share the M3 backbone: Gemma norms, per-head QK norm, partial RoPE on 16 of 32 dims,
SwiGLU-OAI.
Weights:
  bf16             every Linear BF16; norms, router and routing bias F32
  mxfp8            attention, index, MLP and expert Linears MXFP8 (E4M3 + E8M0 per 32)
  nvfp4-experts    routed experts (the MLPs of a model without MoE) ModelOpt NVFP4, rest BF16
  m3.1             the M3.1-Flash recipe: NVFP4 experts + MXFP8 attention/index, rest BF16
Quantized variants start from the BF16-rounded weights, so the BF16 checkpoint of the same seed
holds the originals the quantized ones approximate.
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checkpoint_io  # noqa: E402
import minifloats as mf  # noqa: E402
import tiny_tokenizer  # noqa: E402
from checkpoint_io import RawTensor  # noqa: E402

PRESETS = ["tiny-m3", "tiny-m3.1-flash", "tiny-dense"]
WEIGHTS = ["bf16", "mxfp8", "nvfp4-experts", "m3.1"]
# MLP gate/up weights are this many times 1/sqrt(fan_in) (down proportionally smaller), so a few
# percent of gate/up values pass SwiGLU-OAI's clamp at +-7 and the clamp is exercised.
MLP_GAIN = 3.0


def text_config(preset):
    n = 4
    c = dict(model_type="minimax_m3", hidden_size=128, num_hidden_layers=n, num_attention_heads=8,
             num_key_value_heads=2, head_dim=32, vocab_size=tiny_tokenizer.VOCAB_SIZE,
             max_position_embeddings=8192, rms_norm_eps=1e-6, use_gemma_norm=True, use_qk_norm=True,
             qk_norm_type="per_head", rope_theta=5000000.0, rotary_dim=16, partial_rotary_factor=0.5,
             hidden_act="swigluoai", swiglu_alpha=1.702, swiglu_limit=7.0, swiglu_beta=1.0,
             attention_output_gate=False, tie_word_embeddings=preset == "tiny-dense")
    if preset == "tiny-dense":
        c["intermediate_size"] = 256
        return c
    # tiny-m3.1-flash's experts are wide enough for the engine's W4A16 path (hidden and
    # intermediate multiples of 128); tiny-m3's run their NVFP4 variant in FP32.
    c.update(num_local_experts=8, num_experts_per_tok=2, moe_layer_freq=[0] + [1] * (n - 1),
             intermediate_size=128 if preset == "tiny-m3.1-flash" else 64,
             dense_intermediate_size=256, shared_intermediate_size=64,
             n_shared_experts=1, use_routing_bias=True, routed_scaling_factor=2.0, scoring_func="sigmoid")
    sparse = [1] * n if preset == "tiny-m3.1-flash" else [0] + [1] * (n - 1)
    c["sparse_attention_config"] = dict(
        use_sparse_attention=True, sparse_attention_freq=sparse, sparse_index_dim=32,
        sparse_num_index_heads=2, sparse_topk_blocks=16, sparse_block_size=128, sparse_local_block=1,
        sparse_init_block=0, sparse_score_type="max", sparse_disable_index_value=sparse)
    return c


def master_weights(c, rng):
    """name (without prefix) -> (kind, float64 array). Linear weights are rounded to BF16 here:
    they are the originals every storage variant encodes."""
    h, d, nq, nkv = c["hidden_size"], c["head_dim"], c["num_attention_heads"], c["num_key_value_heads"]
    gemma = c["use_gemma_norm"]
    out = {}

    def linear(name, kind, rows, cols, gain=1.0):
        w = rng.standard_normal((rows, cols)) * (gain / np.sqrt(cols))
        out[name] = (kind, mf.decode_bf16(mf.encode_bf16(w)))

    def norm(name, size):
        out[name] = ("f32", (0.0 if gemma else 1.0) + 0.1 * rng.standard_normal(size))

    def mlp(prefix, names, width, kind):
        linear(f"{prefix}{names[0]}.weight", kind, width, h, MLP_GAIN)
        linear(f"{prefix}{names[1]}.weight", kind, width, h, MLP_GAIN)
        linear(f"{prefix}{names[2]}.weight", kind, h, width, 1.0 / MLP_GAIN)

    embed = rng.standard_normal((c["vocab_size"], h))
    out["model.embed_tokens.weight"] = ("embed", mf.decode_bf16(mf.encode_bf16(embed)))
    sparse_cfg = c.get("sparse_attention_config", {})
    moe = c.get("moe_layer_freq", [0] * c["num_hidden_layers"]) if "num_local_experts" in c else None
    for i in range(c["num_hidden_layers"]):
        a = f"model.layers.{i}."
        norm(a + "input_layernorm.weight", h)
        norm(a + "post_attention_layernorm.weight", h)
        linear(a + "self_attn.q_proj.weight", "attn", nq * d, h)
        linear(a + "self_attn.k_proj.weight", "attn", nkv * d, h)
        linear(a + "self_attn.v_proj.weight", "attn", nkv * d, h)
        linear(a + "self_attn.o_proj.weight", "attn", h, nq * d)
        norm(a + "self_attn.q_norm.weight", d)
        norm(a + "self_attn.k_norm.weight", d)
        if sparse_cfg and sparse_cfg["sparse_attention_freq"][i]:
            di = sparse_cfg["sparse_index_dim"]
            linear(a + "self_attn.index_q_proj.weight", "attn", nkv * di, h)
            linear(a + "self_attn.index_k_proj.weight", "attn", di, h)
            norm(a + "self_attn.index_q_norm.weight", di)
            norm(a + "self_attn.index_k_norm.weight", di)
        if moe and moe[i]:
            m = a + "block_sparse_moe."
            out[m + "gate.weight"] = ("f32", rng.standard_normal((c["num_local_experts"], h)) / np.sqrt(h))
            out[m + "e_score_correction_bias"] = ("f32", 0.5 * rng.standard_normal(c["num_local_experts"]))
            for e in range(c["num_local_experts"]):
                mlp(f"{m}experts.{e}.", ("w1", "w3", "w2"), c["intermediate_size"], "expert")
            mlp(m + "shared_experts.", ("gate_proj", "up_proj", "down_proj"), c["shared_intermediate_size"], "mlp")
        else:
            width = c["dense_intermediate_size"] if moe else c["intermediate_size"]
            # Without MoE the dense MLPs play the experts' part in the NVFP4 recipes.
            mlp(a + "mlp.", ("gate_proj", "up_proj", "down_proj"), width, "mlp" if moe else "expert")
    norm("model.norm.weight", h)
    if not c["tie_word_embeddings"]:
        linear("lm_head.weight", "lm_head", c["vocab_size"], h)
    return out


def storage(kind, weights):
    """How a tensor of this kind is stored: 'f32', 'bf16', 'mxfp8' or 'nvfp4'."""
    if kind == "f32":
        return "f32"
    if kind in ("expert",) and weights in ("nvfp4-experts", "m3.1"):
        return "nvfp4"
    if weights == "mxfp8" and kind in ("attn", "mlp", "expert"):
        return "mxfp8"
    if weights == "m3.1" and kind == "attn":
        return "mxfp8"
    return "bf16"


def encode(name, form, w):
    """The stored tensors for one weight."""
    if form == "f32":
        return {name: RawTensor("F32", w.astype(np.float32))}
    if form == "bf16":
        return {name: RawTensor("BF16", mf.encode_bf16(w))}
    base = name[:-len(".weight")]
    if form == "mxfp8":
        codes, scales = mf.quantize_mxfp8(w)
        return {name: RawTensor("F8_E4M3", codes), base + ".weight_scale_inv": RawTensor("U8", scales)}
    packed, scales, ws2 = mf.quantize_nvfp4(w)
    return {name: RawTensor("U8", packed), base + ".weight_scale": RawTensor("F8_E4M3", scales),
            base + ".weight_scale_2": RawTensor("F32", np.array(ws2, np.float32)),
            base + ".input_scale": RawTensor("F32", np.array(1.0, np.float32))}


def quant_metadata(forms, prefix):
    """ModelOpt-style quantization_config: the algorithm, group size and the Linear modules left
    unquantized (a mixed recipe lists each quantized module with its algorithm instead)."""
    algos = {"nvfp4": ("NVFP4", 16), "mxfp8": ("MXFP8", 32)}
    linears = {n[:-len(".weight")]: f for n, f in forms.items() if n.endswith(".weight") and "norm" not in n
               and "embed_tokens" not in n}
    used = sorted({f for f in linears.values() if f in algos})
    if not used:
        return None
    meta = {"quant_method": "modelopt", "kv_cache_quant_algo": None,
            "exclude_modules": sorted(prefix + m for m, f in linears.items() if f not in algos)}
    if len(used) == 1:
        meta["quant_algo"], meta["group_size"] = algos[used[0]]
    else:
        meta["quant_algo"] = "MIXED_PRECISION"
        meta["quantized_layers"] = {prefix + m: {"quant_algo": algos[f][0], "group_size": algos[f][1]}
                                    for m, f in sorted(linears.items()) if f in algos}
    return meta


def make(preset, weights, seed, out_dir, shards=1):
    if preset not in PRESETS or weights not in WEIGHTS:
        raise ValueError(f"preset must be one of {PRESETS} and weights one of {WEIGHTS}")
    os.makedirs(out_dir, exist_ok=True)
    special = tiny_tokenizer.write(out_dir)
    text = text_config(preset)
    text.update(special)
    nested = preset != "tiny-dense"
    prefix = "language_model." if nested else ""
    masters = master_weights(text, np.random.default_rng(seed))
    forms = {name: storage(kind, weights) for name, (kind, _) in masters.items()}
    tensors = {}
    for name, (_, w) in masters.items():
        tensors.update({prefix + k: v for k, v in encode(name, forms[name], w).items()})
    checkpoint_io.write_checkpoint(out_dir, tensors, shards)

    if nested:
        config = {"architectures": ["MiniMaxM3SparseForConditionalGeneration"], "model_type": "minimax_m3_vl",
                  "text_config": text, "tie_word_embeddings": text["tie_word_embeddings"], **special}
    else:
        config = {"architectures": ["MiniMaxM3ForCausalLM"], **text}
    config["torch_dtype"] = "bfloat16"
    quant = quant_metadata(forms, prefix)
    if quant:
        config["quantization_config"] = quant
        body = {k: v for k, v in quant.items() if k != "quant_method"}
        with open(os.path.join(out_dir, "hf_quant_config.json"), "w") as f:
            json.dump({"producer": {"name": "modelopt", "version": "0.0.0"}, "quantization": body}, f, indent=2)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    with open(os.path.join(out_dir, "generation_config.json"), "w") as f:
        json.dump(special, f, indent=2)
    return out_dir


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", choices=PRESETS, required=True)
    ap.add_argument("--weights", choices=WEIGHTS, default="bf16")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shards", type=int, choices=[1, 2], default=1)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    make(args.preset, args.weights, args.seed, args.out, args.shards)
    print(f"wrote {args.preset} ({args.weights}, seed {args.seed}) to {args.out}")


if __name__ == "__main__":
    main()
