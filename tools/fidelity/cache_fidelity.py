#!/usr/bin/env python3
"""How closely greedy decoding with a quantized KV cache follows the FP32 cache.

Runs `fp4serve generate` greedily once per cache format on the same prompt and reports, against
the FP32 ("auto") run: how many of the generated tokens agree position by position, where the
first disagreement is, and the relative error of the logits while the two runs still share their
prefix (||l - l_fp32|| / ||l_fp32|| per step; the mean and the worst step are shown).

  cache_fidelity.py FP4SERVE MODEL_DIR [--prompt-ids 1] [--steps 200] [--json OUT]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

FORMATS = ["auto", "bf16", "fp8", "nvfp4"]


def run(binary, model, ids, steps, kv, index, workdir):
    logits_path = os.path.join(workdir, f"logits-{kv}-{index}.f32")
    ids_path = os.path.join(workdir, "prompt.txt")
    with open(ids_path, "w") as f:
        f.write(" ".join(str(i) for i in ids))
    cmd = [binary, "generate", "--model", model, "--prompt-ids-file", ids_path, "--max-tokens",
           str(steps), "--temperature", "0", "--ignore-eos", "--kv-cache-dtype", kv,
           "--index-cache-dtype", index, "--json", "--dump-logits", logits_path]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stderr}")
    result = json.loads(out.stdout)
    logits = np.fromfile(logits_path, dtype="<f4").reshape(len(result["token_ids"]), -1)
    return result["token_ids"], logits


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("binary")
    ap.add_argument("model")
    ap.add_argument("--prompt-ids", default="1")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--index-cache-dtype", default="auto",
                    help="index cache of the quantized runs: auto follows --kv-cache-dtype")
    ap.add_argument("--json", help="also write the rows as JSON")
    args = ap.parse_args()
    ids = [int(t) for t in args.prompt_ids.replace(",", " ").split()]
    rows = []
    with tempfile.TemporaryDirectory() as work:
        ref_tokens, ref_logits = run(args.binary, args.model, ids, args.steps, "auto", "auto", work)
        print(f"{'kv cache':<8} {'index':<6} {'agree':>9} {'first diff':>10} {'mean rel err':>12} {'max rel err':>11}")
        for kv in FORMATS:
            tokens, logits = run(args.binary, args.model, ids, args.steps, kv, args.index_cache_dtype, work)
            agree = sum(a == b for a, b in zip(tokens, ref_tokens))
            first = next((i for i, (a, b) in enumerate(zip(tokens, ref_tokens)) if a != b), len(tokens))
            # Step i's logits condition on tokens 0..i-1, shared with the reference up to `first`.
            shared = min(first + 1, len(tokens))
            err = np.linalg.norm(logits[:shared] - ref_logits[:shared], axis=1) / \
                np.linalg.norm(ref_logits[:shared], axis=1)
            row = {"kv_cache": kv, "index_cache": args.index_cache_dtype, "agree": agree,
                   "steps": len(tokens), "first_diff": first if first < len(tokens) else None,
                   "mean_rel_err": float(err.mean()), "max_rel_err": float(err.max())}
            rows.append(row)
            print(f"{kv:<8} {args.index_cache_dtype:<6} {agree:>4}/{len(tokens):<4} "
                  f"{'-' if row['first_diff'] is None else row['first_diff']:>10} "
                  f"{row['mean_rel_err']:>12.2e} {row['max_rel_err']:>11.2e}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
