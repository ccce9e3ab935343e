#!/usr/bin/env python3
"""Reference forward pass of MiniMax-M3-family and Llama-style checkpoints, in numpy.

load(model_dir) reads config.json and the safetensors (dequantizing NVFP4, MXFP8 and BF16 from
their stored bytes) and returns a Model:
    model.logits(tokens)          -> [T, V], teacher-forced, every position
    model.selected_blocks(tokens) -> {layer: int32 [Hkv, T, topk]} ascending ids, -1 padded
    model.index_block_scores(tokens) -> {layer: [Hkv, T, nblocks]} MSA block scores
    model.greedy(prompt, steps)   -> (ids [steps], step_logits [steps, V])
Computation is float64 unless load(..., dtype=np.float32).

CLI: model_reference.py --model DIR --prompt-ids-file F --steps N --out out.npz [--dtype float32]
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checkpoint_io  # noqa: E402
import layers_reference as L  # noqa: E402
import minifloats as mf  # noqa: E402


class Config:
    def __init__(self, root):
        nested = isinstance(root.get("text_config"), dict)
        t = root["text_config"] if nested else root
        self.prefix = "language_model." if nested else ""
        self.hidden = t["hidden_size"]
        self.num_layers = t["num_hidden_layers"]
        self.num_heads = t["num_attention_heads"]
        self.num_kv_heads = t.get("num_key_value_heads", self.num_heads)
        self.head_dim = t.get("head_dim", self.hidden // self.num_heads)
        self.vocab = t["vocab_size"]
        self.tie = t.get("tie_word_embeddings", root.get("tie_word_embeddings", False))
        self.eps = t.get("rms_norm_eps", 1e-6)
        self.gemma_norm = t.get("use_gemma_norm", False)
        self.qk_norm = t.get("use_qk_norm", False)
        self.rope_theta = t.get("rope_theta", 10000.0)
        self.rotary_dim = t.get("rotary_dim") or int(self.head_dim * t.get("partial_rotary_factor", 1.0))
        self.hidden_act = t.get("hidden_act", "silu")
        self.swiglu_alpha = t.get("swiglu_alpha", 1.702)
        self.swiglu_limit = t.get("swiglu_limit", 7.0)
        self.swiglu_beta = t.get("swiglu_beta", 1.0)
        self.num_experts = t.get("num_local_experts", 0) or 0
        if self.num_experts:
            self.num_experts_per_tok = t["num_experts_per_tok"]
            self.moe_layers = [bool(f) for f in t.get("moe_layer_freq", [1] * self.num_layers)]
            self.shared_intermediate = t.get("shared_intermediate_size", 0) or 0
            self.moe_intermediate = t["intermediate_size"]
            self.routing_bias = t.get("use_routing_bias", False)
            self.routed_scaling_factor = t.get("routed_scaling_factor", 1.0)
            if t.get("scoring_func", "sigmoid") != "sigmoid":
                raise ValueError(f"scoring_func {t['scoring_func']!r}: only sigmoid routing is modelled")
        else:
            self.moe_layers = [False] * self.num_layers
        sparse = t.get("sparse_attention_config") or {}
        if sparse.get("use_sparse_attention", False):
            self.sparse_layers = [bool(f) for f in sparse["sparse_attention_freq"]]
            self.index_dim = sparse["sparse_index_dim"]
            self.num_index_heads = sparse.get("sparse_num_index_heads", self.num_kv_heads)
            self.topk = sparse.get("sparse_topk_blocks", 16)
            self.block = sparse.get("sparse_block_size", 128)
            self.local_blocks = sparse.get("sparse_local_block", 1)
            self.init_blocks = sparse.get("sparse_init_block", 0)
            if sparse.get("sparse_score_type", "max") != "max":
                raise ValueError("sparse_score_type must be 'max'")
            if self.num_index_heads != self.num_kv_heads:
                raise ValueError("sparse_num_index_heads must equal num_key_value_heads (one selection per KV group)")
        else:
            self.sparse_layers = [False] * self.num_layers
        for name, flags in (("moe_layer_freq", self.moe_layers), ("sparse_attention_freq", self.sparse_layers)):
            if len(flags) != self.num_layers:
                raise ValueError(f"{name} has {len(flags)} entries, expected {self.num_layers}")


def _dequantize_all(raw):
    """Module weights as float64 arrays by tensor name; quantized Linears are recognised by their
    companion scale tensors."""
    out = {}
    for name, t in raw.items():
        base = name[:-len(".weight")] if name.endswith(".weight") else None
        if base and f"{base}.weight_scale_2" in raw:
            out[name] = mf.dequantize_nvfp4(t.data, raw[f"{base}.weight_scale"].data,
                                            raw[f"{base}.weight_scale_2"].data.item())
        elif base and f"{base}.weight_scale_inv" in raw:
            out[name] = mf.dequantize_mxfp8(t.data, raw[f"{base}.weight_scale_inv"].data)
        elif t.dtype == "BF16":
            out[name] = mf.decode_bf16(t.data)
        elif t.dtype in ("F32", "F64", "F16"):
            out[name] = t.data.astype(np.float64)
        # scales, input_scale and other non-weight tensors are consumed above or ignored
    return out


def load(model_dir, dtype=np.float64):
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = Config(json.load(f))
    raw = checkpoint_io.read_checkpoint(model_dir)
    nvfp4 = {name[:-len(".weight_scale_2")] + ".weight" for name in raw if name.endswith(".weight_scale_2")}
    return Model(cfg, _dequantize_all(raw), dtype, model_dir, nvfp4)


class Model:
    def __init__(self, cfg, tensors, dtype, source="model", nvfp4=frozenset()):
        """nvfp4: names of the weights stored in NVFP4. A layer whose routed experts are all NVFP4
        runs them as the engine does, W4A16: the experts' inputs and the activation between the
        two matmuls rounded to BF16."""
        self.cfg, self.dtype = cfg, np.dtype(dtype)
        p = cfg.prefix

        def get(name):
            if p + name not in tensors:
                raise KeyError(f"{source}: tensor {p + name} is missing")
            return np.ascontiguousarray(tensors[p + name], self.dtype)

        self.embed = get("model.embed_tokens.weight")
        self.final_norm = get("model.norm.weight")
        self.lm_head = self.embed if cfg.tie else get("lm_head.weight")
        self.layers = []
        for i in range(cfg.num_layers):
            a = f"model.layers.{i}."
            layer = {n: get(a + n + ".weight") for n in ("input_layernorm", "post_attention_layernorm")}
            for n in ("q_proj", "k_proj", "v_proj", "o_proj"):
                layer[n] = get(f"{a}self_attn.{n}.weight")
            names = (["q_norm", "k_norm"] if cfg.qk_norm else [])
            if cfg.sparse_layers[i]:
                names += ["index_q_proj", "index_k_proj", "index_q_norm", "index_k_norm"]
            for n in names:
                layer[n] = get(f"{a}self_attn.{n}.weight")
            if cfg.moe_layers[i]:
                m = a + "block_sparse_moe."
                layer["router"] = get(m + "gate.weight")
                if cfg.routing_bias:
                    layer["router_bias"] = get(m + "e_score_correction_bias")
                names = [[f"{m}experts.{e}.{w}.weight" for w in ("w1", "w3", "w2")] for e in range(cfg.num_experts)]
                layer["experts"] = [tuple(get(n) for n in expert) for expert in names]
                # W4A16 where the engine runs it: NVFP4 experts of the shapes its grouped kernel
                # tiles (model_weights.h, w4a16_expert_shapes).
                layer["experts_nvfp4"] = (all(p + n in nvfp4 for expert in names for n in expert)
                                          and cfg.hidden % 128 == 0 and cfg.moe_intermediate % 128 == 0)
                layer["experts_w4a16"] = layer["experts_nvfp4"]
                if cfg.shared_intermediate:
                    layer["shared"] = tuple(get(f"{m}shared_experts.{w}.weight")
                                            for w in ("gate_proj", "up_proj", "down_proj"))
            else:
                layer["mlp"] = tuple(get(f"{a}mlp.{w}.weight") for w in ("gate_proj", "up_proj", "down_proj"))
            self.layers.append(layer)

    def uses_w4a16(self):
        return any(layer.get("experts_w4a16") for layer in self.layers)

    def set_w4a16(self, enabled):
        """Whether NVFP4 experts round their activations to BF16 as the engine does (the default);
        off, the model computes the same function without those roundings."""
        for layer in self.layers:
            if "experts_w4a16" in layer:
                layer["experts_w4a16"] = enabled and layer["experts_nvfp4"]
        return self

    def norm(self, x, w):
        return L.rms_norm(x, w, self.cfg.eps, self.cfg.gemma_norm)

    def new_cache(self):
        c = self.cfg
        return {"len": 0, "layers": [{"k": np.zeros((0, c.num_kv_heads, c.head_dim), self.dtype),
                                      "v": np.zeros((0, c.num_kv_heads, c.head_dim), self.dtype),
                                      "ik": np.zeros((0, c.index_dim if c.sparse_layers[i] else 0), self.dtype)}
                                     for i in range(c.num_layers)]}

    def forward(self, tokens, cache=None, record=None):
        """Runs `tokens` at the positions after those already in `cache` (a fresh cache when None)
        and returns their logits [Tn, V]. record: dict filled with per-layer 'blocks' and 'scores'."""
        cache = cache if cache is not None else self.new_cache()
        tokens = np.asarray(tokens, np.int64)
        pos = np.arange(cache["len"], cache["len"] + len(tokens))
        x = self.embed[tokens]
        for i, layer in enumerate(self.layers):
            x = x + self._attention(i, layer, self.norm(x, layer["input_layernorm"]), pos, cache["layers"][i], record)
            h2 = self.norm(x, layer["post_attention_layernorm"])
            x = x + (L.moe(h2, layer, self.cfg) if self.cfg.moe_layers[i] else L.mlp(h2, *layer["mlp"], self.cfg))
        cache["len"] += len(tokens)
        return self.norm(x, self.final_norm) @ self.lm_head.T

    def _heads(self, h, w, n, d, norm_w, cos, sin):
        y = (h @ w.T).reshape(len(h), n, d)
        if norm_w is not None:
            y = self.norm(y, norm_w)
        return L.apply_rope(y, cos, sin)

    def _attention(self, i, layer, h, pos, kv, record):
        c = self.cfg
        d, hkv, group = c.head_dim, c.num_kv_heads, c.num_heads // c.num_kv_heads
        cos, sin = L.rope_tables(pos, c.rotary_dim, c.rope_theta, self.dtype)
        q = self._heads(h, layer["q_proj"], c.num_heads, d, layer.get("q_norm"), cos, sin)
        k = self._heads(h, layer["k_proj"], hkv, d, layer.get("k_norm"), cos, sin)
        v = (h @ layer["v_proj"].T).reshape(len(h), hkv, d)
        kv["k"] = np.concatenate([kv["k"], k])
        kv["v"] = np.concatenate([kv["v"], v])
        sparse = c.sparse_layers[i]
        if sparse:
            iq = self._heads(h, layer["index_q_proj"], hkv, c.index_dim, layer["index_q_norm"], cos, sin)
            ik = self._heads(h, layer["index_k_proj"], 1, c.index_dim, layer["index_k_norm"], cos, sin)
            kv["ik"] = np.concatenate([kv["ik"], ik[:, 0]])
            blocks, scores = [], []
        out = np.empty((len(h), c.num_heads, d), self.dtype)
        for g in range(hkv):
            qg = q[:, g * group:(g + 1) * group].transpose(1, 0, 2)  # [G, Tn, D]
            sel, sc = [], []
            for s0 in range(0, len(h), L.ATTENTION_CHUNK):
                rows = slice(s0, s0 + L.ATTENTION_CHUNK)
                allowed = None
                if sparse:
                    s = L.block_max_scores(iq[rows, g], kv["ik"], pos[rows], c.block)
                    ids, bmask = L.select_blocks(s, pos[rows], c.block, c.topk, c.init_blocks, c.local_blocks)
                    allowed = np.repeat(bmask, c.block, axis=1)
                    sel.append(ids)
                    sc.append(s)
                out[rows, g * group:(g + 1) * group] = L.attend(
                    qg[:, rows], kv["k"][:, g], kv["v"][:, g], pos[rows], allowed).transpose(1, 0, 2)
            if sparse:
                blocks.append(np.concatenate(sel))
                scores.append(np.concatenate(sc))
        if sparse and record is not None:
            record.setdefault("blocks", {})[i] = np.stack(blocks)
            record.setdefault("scores", {})[i] = np.stack(scores)
        return out.reshape(len(h), -1) @ layer["o_proj"].T

    def logits(self, tokens):
        return self.forward(tokens)

    def selected_blocks(self, tokens):
        record = {}
        self.forward(tokens, record=record)
        return record.get("blocks", {})

    def index_block_scores(self, tokens):
        record = {}
        self.forward(tokens, record=record)
        return record.get("scores", {})

    def greedy(self, prompt, steps, record=None):
        """Greedy decoding with a KV cache; argmax ties go to the lowest id. When `record` is a
        dict, it receives for each sparse layer and each step (the last prompt position, then
        each decoded token) the MSA block scores ('scores': {layer: [[Hkv, nblocks]] * steps})
        and how near the selection is to changing ('margins': {layer: [Hkv, steps]}, see
        layers_reference.selection_margin)."""
        cache = self.new_cache()
        c = self.cfg
        scores = {i: [] for i in range(c.num_layers) if c.sparse_layers[i]}

        def run(tokens):
            rec = {}
            out = self.forward(tokens, cache, rec)[-1]
            for i in scores:
                scores[i].append(rec["scores"][i][:, -1])
            return out

        logits = run(prompt)
        ids, step_logits = [], []
        for step in range(steps):
            step_logits.append(logits)
            ids.append(int(np.argmax(logits)))
            if step + 1 < steps:
                logits = run([ids[-1]])
        if record is not None:
            pos = np.arange(len(prompt) - 1, len(prompt) - 1 + steps)
            record["scores"] = scores
            record["margins"] = {i: np.array([[L.selection_margin(s[g][None], pos[n:n + 1], c.block, c.topk,
                                                                  c.init_blocks, c.local_blocks)[0]
                                               for n, s in enumerate(per_step)] for g in range(c.num_kv_heads)])
                                 for i, per_step in scores.items()}
        return np.array(ids, np.int64), np.array(step_logits).reshape(steps, c.vocab)


def read_ids(path):
    with open(path) as f:
        return [int(t) for t in f.read().split()]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompt-ids-file", required=True, help="whitespace-separated token ids")
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    ap.add_argument("--out", help="write prompt, ids and step_logits to this .npz")
    args = ap.parse_args()
    model = load(args.model, np.dtype(args.dtype))
    prompt = read_ids(args.prompt_ids_file)
    ids, step_logits = model.greedy(prompt, args.steps)
    print(" ".join(str(i) for i in ids))
    if args.out:
        np.savez(args.out, prompt=np.array(prompt), ids=ids, step_logits=step_logits)


if __name__ == "__main__":
    main()
