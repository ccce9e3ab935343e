#!/usr/bin/env python3
"""The built-in model (models/tiny-m3.1-flash-tasks) answers its two tasks through the engine
with the 4-bit caches, and at 4K tokens its MSA selection is really sparse and finds the needle.

    default_model_test.py FP4SERVE MODEL_DIR

One `fp4serve serve` with NVFP4 KV and index caches, greedy:
  * 100 fixed arithmetic prompts with no context (34 +, 34 -, 32 *): at least 95 right, the
    built-in model's target.
  * 50 fixed retrieval prompts at 4,096 tokens (one haystack, the needle anywhere in it): at
    least 48 right (95%, the built-in model's target; the model committed now answers 50).
Then `fp4serve generate --dump-selection` (with the indexer's FP32 query, then with its FP8
rounding, `--index-query-dtype fp8`) on the first SELECTION_CHECKS retrieval prompts whose
needle line lies outside the local block, right or wrong: every layer and KV head keeps exactly
16 of the 32 visible blocks (half the context is dropped), and one layer keeps a block of the
needle's line in at least 3 of its 4 heads for every one of those prompts: the layer that
retrieves. A selection blind to the question keeps a given non-local block in a head with
probability 15/31, so it passes with probability 4 layers x P(>= 3 of 4 heads)^4 =
4 x 0.289^4 < 3% (a little more for the ~8% of lines that straddle two blocks).

The questions come from tools/train/data.py's evaluation stream (numpy only), so they are the
ones tools/train/evaluate.py asks (which needs numpy, not PyTorch); the model's config.json
records the task settings."""
import json
import os
import subprocess
import sys
import tempfile
from types import SimpleNamespace

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, REPO)

from tools.train import data, evaluate  # noqa: E402
from tools.train import tokenizer as tok  # noqa: E402

SEED = 2026
ARITHMETIC, ARITHMETIC_TARGET = 100, 95
RETRIEVAL, RETRIEVAL_TARGET = 50, 48
LENGTH = 4096
SELECTION_CHECKS = 4

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from checklist import check, summary  # noqa: E402


def task_config(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        tasks = json.load(f)["fp4serve_train"]["tasks"]
    return data.DataConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in tasks.items()})


def questions(cfg):
    qs = data.eval_prompts(SEED, cfg, [LENGTH], haystacks=1, n_kv=RETRIEVAL, n_arith=0, n_short=34)
    retrieval = [q for q in qs if q["task"] == "kv"]
    arithmetic = [q for q in qs if q["task"] == "arith"][:ARITHMETIC]
    return arithmetic, retrieval


def needle_blocks(q, block):
    """The blocks the needle's line `key=value\\n` spans in the prompt (one token per byte)."""
    text = tok.decode(q["prompt"])
    key = text[text.rindex("?") + 1:-1]
    line = f"{key}={q['answer']}\n"
    at = 0 if text.startswith(line) else text.index("\n" + line) + 1
    return set(range(at // block, (at + len(line) - 1) // block + 1))


def check_selection(binary, model_dir, q, tmp, query="fp32"):
    ids, sel = os.path.join(tmp, "prompt.ids"), os.path.join(tmp, "selection.json")
    with open(ids, "w") as f:
        f.write(" ".join(map(str, q["prompt"])))
    r = subprocess.run([binary, "generate", "--model", model_dir, "--prompt-ids-file", ids, "--max-tokens", "1",
                        "--temperature", "0", "--kv-cache-dtype", "nvfp4", "--index-cache-dtype", "nvfp4",
                        "--index-query-dtype", query, "--dump-selection", sel], capture_output=True, text=True)
    check(r.returncode == 0, f"generate --dump-selection exits 0: {r.stderr[-500:]}")
    if r.returncode != 0:
        return None
    with open(sel) as f:
        s = json.load(f)
    n = len(q["prompt"])
    visible = -(-n // s["block_size"])
    last = (n - 1) // s["block_size"]
    needle = needle_blocks(q, s["block_size"])
    check(visible == 32 and s["topk"] == 16, f"a 4K prompt sees 32 blocks, picks 16 (saw {visible}, {s['topk']})")
    keeping = []  # per layer, the heads that keep a block of the needle's line
    for l, layer in enumerate(s["layers"]):
        check(layer is not None, f"layer {l} is sparse")
        for h, blocks in enumerate(layer or []):
            kept = [b for b in blocks if b >= 0]
            check(len(kept) == 16 and len(set(kept)) == 16 and all(0 <= b < visible for b in kept),
                  f"layer {l} head {h} keeps 16 distinct visible blocks, drops {visible - len(kept)}: {blocks}")
            check(last in kept, f"layer {l} head {h} keeps the local block {last}")
        keeping.append(sum(bool(needle & set(blocks)) for blocks in layer or []))
    print(f"selection ({query} query): needle line in blocks {sorted(needle)} of {visible}; heads keeping it "
          f"per layer: {keeping}", flush=True)
    return keeping


def main():
    binary, model_dir = sys.argv[1], sys.argv[2]
    arithmetic, retrieval = questions(task_config(model_dir))
    check(len(arithmetic) == ARITHMETIC and len(retrieval) == RETRIEVAL, "the fixed samples have their sizes")
    args = SimpleNamespace(lengths=[LENGTH], threads=0, concurrency=4)
    results = evaluate.run_row_serve(binary, model_dir, "nvfp4", "nvfp4", arithmetic + retrieval, args)
    right = {"arith": 0, "kv": 0}
    wrong = []
    for r in results:
        ok = r["got"] == r["answer"]
        right[r["task"]] += ok
        if not ok:
            wrong.append(f"{r['op']}: want {r['answer']}, got {r['got']!r}")
    print(f"NVFP4 KV and index caches: arithmetic {right['arith']}/{ARITHMETIC}, retrieval at {LENGTH} "
          f"tokens {right['kv']}/{RETRIEVAL}", flush=True)
    print("wrong:", "; ".join(wrong[:20]))
    check(right["arith"] >= ARITHMETIC_TARGET, f"arithmetic: {right['arith']}/{ARITHMETIC} right, need "
          f"{ARITHMETIC_TARGET}")
    check(right["kv"] >= RETRIEVAL_TARGET, f"retrieval at {LENGTH}: {right['kv']}/{RETRIEVAL} right, need "
          f"{RETRIEVAL_TARGET}")

    # Chosen without looking at the answers: a blind selection must not pass by the answers'
    # having picked the prompts whose needle it happened to keep.
    # The same with the indexer's query rounded to one E4M3 value per element (the FP8 path's
    # coarsest query): the retrieving layer must still find the needle.
    off_local = [q for q in retrieval if (len(q["prompt"]) - 1) // 128 not in needle_blocks(q, 128)]
    for query in ("fp32", "fp8"):
        with tempfile.TemporaryDirectory() as tmp:
            kept = [check_selection(binary, model_dir, q, tmp, query) for q in off_local[:SELECTION_CHECKS]]
        kept = [k for k in kept if k]
        retrieving = [l for l in range(len(kept[0]) if kept else 0) if all(k[l] >= 3 for k in kept)]
        check(len(kept) == SELECTION_CHECKS and retrieving,
              f"{query} query: one layer keeps a block of the needle's line in 3 of 4 heads for every prompt "
              f"(per prompt: {kept})")

    return summary("default_model")


if __name__ == "__main__":
    sys.exit(main())
