"""Exact-match accuracy in PyTorch, dense attention against MSA (the engine's selection), on the
evaluation questions of evaluate.py: a quick check of a checkpoint on the training machine
before the engine's slower evaluation.

    python -m tools.train.torch_eval --checkpoint RUN/checkpoint.pt [--device cuda]
    python -m tools.train.torch_eval --model MODEL          (an exported directory)

Teacher forcing: the question and its expected answer in one forward pass; an answer is right
when every answer token (and the newline after it) is the argmax at its position, which is
exactly when greedy decoding would produce it. The cache is not modelled (no quantization).
"""
import argparse
import json
import os
import sys
import time

import torch

from tools.train import data, hf_io
from tools.train import tokenizer as tok
from tools.train.export import model_from_checkpoint


def exact(model, question, mode, device):
    answer = tok.encode(question["answer"] + "\n")
    ids = torch.tensor(question["prompt"] + answer, device=device)[None]
    with torch.no_grad(), torch.autocast(device.split(":")[0], torch.bfloat16, enabled=device.startswith("cuda")):
        logits = model(ids, mode=mode)[0, len(question["prompt"]) - 1:-1]
    return bool((logits.argmax(-1).cpu() == torch.tensor(answer)).all())


def evaluate(model, questions, device, modes=("dense", "sparse")):
    """{mode: {task@length: (right, asked)}}."""
    out = {}
    for mode in modes:
        cells = out.setdefault(mode, {})
        for q in questions:
            key = f"{q['task']}@{q['length']}"
            ok, n = cells.get(key, (0, 0))
            cells[key] = (ok + exact(model, q, mode, device), n + 1)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--checkpoint")
    src.add_argument("--model")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--lengths", default="1024,4096,16384,32768")
    ap.add_argument("--samples", type=int, default=16)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--out", help="write the numbers as JSON here")
    args = ap.parse_args(argv)
    if args.checkpoint:
        model, ckpt = model_from_checkpoint(args.checkpoint)
        tasks = ckpt["batch_config"]["tasks"]
    else:
        model = hf_io.load_model(args.model, torch.float32)
        with open(os.path.join(args.model, "config.json")) as f:
            tasks = json.load(f).get("fp4serve_train", {}).get("tasks", {})
    model = model.float().to(args.device).eval()
    cfg = data.DataConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in tasks.items()})
    lengths = sorted(int(n) for n in args.lengths.split(","))
    lengths = [n for n in lengths if n <= model.cfg.max_position_embeddings]
    questions = data.eval_prompts(args.seed, cfg, lengths, 1, args.samples, args.samples // 2, args.samples // 2)
    t0 = time.time()
    result = evaluate(model, questions, args.device)
    keys = sorted(result["dense"], key=lambda k: (int(k.split("@")[1]), k))
    print(f"{'question':<14} {'dense':>9} {'MSA':>9}")
    for k in keys:
        d, s = result["dense"][k], result["sparse"][k]
        print(f"{k:<14} {d[0]:>4}/{d[1]:<4} {s[0]:>4}/{s[1]:<4}")
    print(f"({time.time() - t0:.0f} s)")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
