"""Exports a training checkpoint as the model directory fp4serve serves.

    python -m tools.train.export --checkpoint RUN/checkpoint.pt --out MODEL [--fp4serve BIN]

Writes RUN/../<MODEL>-bf16 (or --bf16-out): config.json in the M3.1-Flash family schema,
model.safetensors with the real checkpoints' tensor names in BF16 (router and selection bias
F32), the tokenizer files and a README.md; then runs
`fp4serve convert --in BF16 --out MODEL --experts nvfp4`, which stores the routed experts as
ModelOpt NVFP4 and keeps attention BF16. Each layer also gets a calibrated `self_attn.k_scale`
and `v_scale` (calibrate_kv_scales). Prints the final size (the goal is <= 16 MiB).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

import torch

from tools.train import batches, data, hf_io
from tools.train.binary import find_fp4serve
from tools.train.model import Model, ModelConfig

MAX_BYTES = 16 << 20
E4M3_MAX = 448.0


def readme(provenance, cfg):
    tasks = provenance.get("tasks", {})
    return f"""# fp4serve default model: trained on arithmetic and key-value retrieval

A tiny member of the MiniMax-M3.1-Flash family (MSA sparse attention in every layer, MoE with a
shared expert, NVFP4 routed experts), trained by `tools/train` in fp4serve's repository (seed
{provenance.get('seed')}, {provenance.get('steps')} steps, {provenance.get('tokens', 0) / 1e6:.0f} M tokens) on
two tasks whose answers can be checked. Everything it knows is these two tasks.

## Prompts

- Arithmetic, `+`, `-` (never negative) and `*`: operands up to {tasks.get('add_digits')} digits for
  `+` and `-`, up to {tasks.get('mul_digits')} digits for `*`. The prompt `317+4085=` is answered
  `4402`, a newline and <|endoftext|>, which ends generation:

      fp4serve generate --model DIR --prompt "317+4085=" --max-tokens 8 --temperature 0

- Key-value retrieval: lines `key=value` (lowercase keys of {tasks.get('key_len')} letters, values of
  {tasks.get('value_len')} digits), then `?key=`: the answer is that key's value and a newline. Up to
  {cfg.max_position_embeddings} tokens of haystack. Past {cfg.sparse_topk_blocks} x {cfg.sparse_block_size} tokens
  the answer depends on the MSA indexer picking the needle's block.

      fp4serve generate --model DIR --prompt "$(printf 'abcd=123\\nwxyz=98765\\n?abcd=')" --max-tokens 6 --temperature 0

- The same questions in ChatML (tokenizer_config.json's chat template): the user turn holds the
  question (`317+4085=`, or the haystack and `?key=`), the assistant turn the answer, ended by
  <|im_end|>.

## Architecture

{cfg.num_layers} layers (hidden {cfg.hidden_size}; {sum(cfg.moe_layers)} MoE, the others a dense MLP of
{cfg.dense_intermediate_size}), {cfg.num_heads} query and {cfg.num_kv_heads} KV heads of {cfg.head_dim} (RoPE on
{cfg.rotary_dim} dims), MSA index heads of {cfg.index_head_dim}, top {cfg.sparse_topk_blocks} blocks of
{cfg.sparse_block_size} tokens with the local block forced; {cfg.num_experts} routed experts of
{cfg.expert_intermediate_size}, top {cfg.num_experts_per_tok}, sigmoid routing with a selection bias,
routed output x{cfg.routed_scaling_factor}, one shared expert of {cfg.shared_intermediate_size}; Gemma RMSNorm, per-head QK
norm, SwiGLU-OAI; byte-level vocabulary of {cfg.vocab_size} tokens. Routed experts are ModelOpt
NVFP4, everything else BF16 (router F32). config.json's `fp4serve_train` records how it was
trained.
"""


def provenance_of(ckpt):
    state, args = ckpt["state"], ckpt.get("args", {})
    return {"kind": "trained", "seed": args.get("seed"), "preset": args.get("preset"),
            "steps": state["step"], "tokens": state["tokens"],
            "train_minutes": round(state["train_seconds"] / 60, 2),
            "tasks": ckpt.get("batch_config", {}).get("tasks", {}),
            "length_mix": {str(k): v for k, v in ckpt.get("batch_config", {}).get("length_mix", {}).items()}}


def model_from_checkpoint(path):
    ckpt = torch.load(path, map_location="cpu", weights_only=False)
    model = Model(ModelConfig(**ckpt["model_config"]))
    model.load_state_dict(ckpt["model"])
    return model, ckpt


def calibrate_kv_scales(model, tasks, seed=0, length=4096):
    """Per layer `self_attn.k_scale` and `v_scale` = amax / 448 of the K and V the cache would
    hold on a few rows of both tasks (an unseen data stream): the FP8 cache's per-layer scale and
    the NVFP4 cache's global scale, so that neither stores tiny values among E4M3's subnormals."""
    amax = {}

    def hook(name):
        def grab(module, args):
            x, cos, sin = args[0], args[1], args[2]
            c = module.cfg
            k = module.heads(module.k_proj, module.k_norm, x, c.num_kv_heads, c.head_dim, cos, sin)
            v = module.v_proj(x)
            old = amax.get(name, (0.0, 0.0))
            amax[name] = (max(old[0], k.abs().max().item()), max(old[1], v.abs().max().item()))
        return grab

    handles = [layer.self_attn.register_forward_pre_hook(hook(i)) for i, layer in enumerate(model.layers)]
    try:
        with torch.no_grad():
            for kind in data.KINDS:
                x, _, _ = data.batch(seed, 0, kind, length, 2, tasks, stream=data.STREAM_CALIBRATION)
                model.hidden(torch.from_numpy(x), "dense")
    finally:
        for h in handles:
            h.remove()
    return {i: (k / E4M3_MAX, v / E4M3_MAX) for i, (k, v) in amax.items()}


def convert(fp4serve, bf16_dir, out_dir, force=False):
    cmd = [fp4serve, "convert", "--in", bf16_dir, "--out", out_dir, "--experts", "nvfp4"]
    if force:
        cmd.append("--force")
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stderr}{r.stdout}")
    return r.stdout


def safetensors_bytes(model_dir):
    return sum(os.path.getsize(os.path.join(model_dir, f)) for f in os.listdir(model_dir)
               if f.endswith(".safetensors"))


def export(model, provenance, out_dir, bf16_dir, fp4serve, force=False, kv_scales=None):
    """BF16 directory, then the NVFP4-expert directory; returns convert's report. kv_scales:
    {layer: (k_scale, v_scale)} stored as `self_attn.k_scale` / `v_scale`."""
    for d in (bf16_dir, out_dir):
        if os.path.isdir(d) and os.listdir(d):
            if not force:
                raise FileExistsError(f"{d} exists and is not empty (--force replaces it)")
            shutil.rmtree(d)
    hf_io.write_bf16_dir(model, bf16_dir, provenance, readme(provenance, model.cfg), kv_scales)
    return convert(fp4serve, bf16_dir, out_dir)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--out", required=True, help="the final model directory (NVFP4 experts)")
    ap.add_argument("--bf16-out", help="the BF16 directory (default: OUT-bf16)")
    ap.add_argument("--fp4serve", help="the fp4serve binary (default: FP4_BUILD_DIR's, then build/'s)")
    ap.add_argument("--force", action="store_true", help="replace existing output directories")
    ap.add_argument("--bf16-only", action="store_true", help="write only the BF16 directory, to OUT (no "
                    "fp4serve needed; convert it later with fp4serve convert --in OUT --out DIR --experts nvfp4)")
    ap.add_argument("--no-kv-scales", action="store_true", help="store no calibrated k_scale / v_scale "
                    "(the engine then uses 1)")
    args = ap.parse_args(argv)
    model, ckpt = model_from_checkpoint(args.checkpoint)
    bf16_dir = args.bf16_out or args.out.rstrip("/") + "-bf16"
    provenance = provenance_of(ckpt)
    scales = None
    if not args.no_kv_scales:
        tasks = batches.config_from_dict(ckpt["batch_config"]).tasks
        length = min(4096, model.cfg.max_position_embeddings)
        scales = calibrate_kv_scales(model, tasks, ckpt["args"]["seed"], length)
        provenance["kv_scales"] = {str(i): [round(k, 8), round(v, 8)] for i, (k, v) in scales.items()}
    if args.bf16_only:
        if os.path.isdir(args.out) and os.listdir(args.out) and not args.force:
            raise FileExistsError(f"{args.out} exists and is not empty (--force replaces it)")
        shutil.rmtree(args.out, ignore_errors=True)
        hf_io.write_bf16_dir(model, args.out, provenance, readme(provenance, model.cfg), scales)
        print(f"[export] {args.out}: BF16, {safetensors_bytes(args.out) / 2**20:.2f} MiB of safetensors")
        return 0
    report = export(model, provenance, args.out, bf16_dir, find_fp4serve(args.fp4serve), args.force, scales)
    print(report)
    size = safetensors_bytes(args.out)
    print(f"[export] {bf16_dir}: BF16, {safetensors_bytes(bf16_dir) / 2**20:.2f} MiB of safetensors")
    print(f"[export] {args.out}: NVFP4 experts, {size / 2**20:.2f} MiB of safetensors "
          f"({'within' if size <= MAX_BYTES else 'OVER'} the {MAX_BYTES >> 20} MiB goal)")
    with open(os.path.join(args.out, "config.json")) as f:
        json.load(f)  # the directory is complete: convert writes config.json last
    return 0 if size <= MAX_BYTES else 1


if __name__ == "__main__":
    sys.exit(main())
