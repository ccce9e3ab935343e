"""Accuracy of a model directory through fp4serve itself, per task, context length, KV-cache
format, index-cache format, and MSA against forced dense attention.

    python -m tools.train.evaluate --model MODEL --out EVALDIR [--fp4serve BIN]
        [--lengths 1024,4096,16384,32768] [--samples 8] [--rows all|main|ROW,...]

Rows: MSA with KV cache {auto (= fp32), bf16, fp8, nvfp4} x index cache {bf16, fp8, nvfp4}, and
dense attention with each KV cache. Dense is forced by a copy of the model directory whose
config.json sets sparse_topk_blocks to the number of blocks in max_position_embeddings, so that
every visible block is always selected (the index branch still runs; it cannot drop anything).

Questions (data.eval_prompts, from streams training never used): per context length, retrieval
of a needle at a uniform depth and arithmetic after a haystack; plus arithmetic with no context.
Every length's haystack is a prefix of one master haystack, so `--engine serve` (one
`fp4serve serve` per row, questions as token ids to /v1/completions, greedy, stop at a newline)
prefills it once per row and its prefix cache serves the rest. `--engine generate` runs one
`fp4serve generate` per question instead (no sharing; for small runs). An answer counts when
the completion up to the first newline is exactly the expected text.

Writes EVALDIR/eval.md (a table) and EVALDIR/eval.json (every question and answer).
"""
import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

from tools.train import data
from tools.train.binary import find_fp4serve

KV_DTYPES = ["auto", "bf16", "fp8", "nvfp4"]
INDEX_DTYPES = ["bf16", "fp8", "nvfp4"]
# The rows that matter most run first, so a time budget cuts the least informative ones.
MAIN_ROWS = ["msa/auto/auto", "dense/auto/-", "msa/nvfp4/nvfp4", "msa/fp8/fp8", "msa/bf16/bf16", "dense/nvfp4/-"]
FP32_BYTES = 4


def all_rows():
    rows = list(MAIN_ROWS)
    for kv in KV_DTYPES:
        for idx in INDEX_DTYPES:
            rows.append(f"msa/{kv}/{idx}")
        rows.append(f"dense/{kv}/-")
    return list(dict.fromkeys(rows))


def parse_rows(text):
    if text == "all":
        return all_rows()
    if text == "main":
        return list(MAIN_ROWS)
    rows = [r.strip() for r in text.split(",") if r.strip()]
    for r in rows:
        parts = r.split("/")
        ok = len(parts) == 3 and parts[0] in ("msa", "dense") and parts[1] in KV_DTYPES and \
            (parts[2] in INDEX_DTYPES + ["auto"] if parts[0] == "msa" else parts[2] == "-")
        if not ok:
            raise ValueError(f"--rows: '{r}' is not msa/KV/INDEX or dense/KV/- (KV in {KV_DTYPES}, INDEX in {INDEX_DTYPES})")
    return rows


def dense_copy(model_dir, workdir):
    """The model directory with every file linked and config.json asking for as many blocks as
    the context has, which makes the selection the whole causal context."""
    out = os.path.join(workdir, "dense-model")
    os.makedirs(out, exist_ok=True)
    for name in os.listdir(model_dir):
        if name != "config.json" and not os.path.exists(os.path.join(out, name)):
            os.symlink(os.path.abspath(os.path.join(model_dir, name)), os.path.join(out, name))
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    text = config.get("text_config", config)
    blocks = math.ceil(text["max_position_embeddings"] / text["sparse_attention_config"]["sparse_block_size"])
    text["sparse_attention_config"]["sparse_topk_blocks"] = blocks
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    return out


def answer_of(text):
    return text.split("\n", 1)[0].strip()


class Server:
    """One `fp4serve serve` on a free loopback port."""

    def __init__(self, binary, model_dir, kv, index, threads, max_len, seqs):
        with open(os.path.join(model_dir, "config.json")) as f:
            t = json.load(f)
        t = t.get("text_config", t)
        per_token = t["num_hidden_layers"] * (2 * t["num_key_value_heads"] * t["head_dim"] +
                                              t["sparse_attention_config"]["sparse_index_dim"]) * FP32_BYTES
        # Room for every running sequence plus the cached haystack, at FP32 (the largest format).
        memory = per_token * (max_len + 1024) * (seqs + 2)
        cmd = [binary, "serve", "--model", model_dir, "--port", "0", "--served-model-name", "eval",
               "--kv-cache-dtype", kv, "--max-model-len", str(max_len), "--max-num-seqs", str(seqs),
               "--kv-cache-memory", str(memory)]
        if index != "-":
            cmd += ["--index-cache-dtype", index]
        if threads:
            cmd += ["--threads", str(threads)]
        self.log = tempfile.TemporaryFile("w+")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, text=True)
        self.port = None
        deadline = time.time() + 120
        while self.port is None:
            self.log.seek(0)
            found = re.search(r"on http://[^:]+:(\d+)", self.log.read())
            if found:
                self.port = int(found.group(1))
            elif self.proc.poll() is not None or time.time() > deadline:
                self.log.seek(0)
                raise RuntimeError(f"{' '.join(cmd)} did not start:\n{self.log.read()[-2000:]}")
            else:
                time.sleep(0.2)

    def complete(self, prompt, max_tokens):
        body = json.dumps({"model": "eval", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                           "stop": ["\n"]}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/v1/completions", body,
                                     {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=3600) as r:
            reply = json.load(r)
        return reply["choices"][0]["text"], reply["usage"]["prompt_tokens_details"]["cached_tokens"]

    def close(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def run_row_serve(binary, model_dir, kv, index, questions, args):
    with open(os.path.join(model_dir, "config.json")) as f:
        t = json.load(f)
    context = t.get("text_config", t)["max_position_embeddings"]
    server = Server(binary, model_dir, kv, index, args.threads, min(max(args.lengths) + 64, context),
                    args.concurrency)
    try:
        def ask(q):
            text, cached = server.complete(q["prompt"], len(q["answer"]) + 2)
            return {**q, "got": answer_of(text), "cached": cached}
        results = []
        by_haystack = {}
        for q in questions:
            by_haystack.setdefault(q["haystack"], []).append(q)
        with ThreadPoolExecutor(args.concurrency) as pool:
            for h, qs in by_haystack.items():
                if h is not None:
                    # The longest context alone first: it fills the prefix cache for the rest.
                    first = max(range(len(qs)), key=lambda i: len(qs[i]["prompt"]))
                    results.append(ask(qs[first]))
                    qs = qs[:first] + qs[first + 1:]
                results.extend(pool.map(ask, qs))
        return results
    finally:
        server.close()


def run_row_generate(binary, model_dir, kv, index, questions, args):
    def ask(q):
        with tempfile.NamedTemporaryFile("w", suffix=".ids") as f:
            f.write(" ".join(map(str, q["prompt"])))
            f.flush()
            cmd = [binary, "generate", "--model", model_dir, "--prompt-ids-file", f.name, "--max-tokens",
                   str(len(q["answer"]) + 2), "--temperature", "0", "--json", "--kv-cache-dtype", kv]
            if index != "-":
                cmd += ["--index-cache-dtype", index]
            if args.threads:
                cmd += ["--threads", str(args.threads)]
            r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} exited {r.returncode}: {r.stderr[-1000:]}")
        return {**q, "got": answer_of(json.loads(r.stdout.strip().splitlines()[-1])["text"]), "cached": 0}
    with ThreadPoolExecutor(args.concurrency) as pool:
        return list(pool.map(ask, questions))


def cell_key(q):
    return f"{q['task']}@{q['length']}"


def table(rows_out, lengths):
    cols = ["arith@0"] + [f"{t}@{n}" for n in lengths for t in ("kv", "arith")]
    names = {"arith@0": "arith (no context)"}
    size = {n: f"{n // 1024}K" if n % 1024 == 0 else str(n) for n in lengths}
    names.update({f"{t}@{n}": f"{'retrieval' if t == 'kv' else 'arith'} {size[n]}" for n in lengths for t in ("kv", "arith")})
    lines = ["| attention | KV cache | index cache | " + " | ".join(names[c] for c in cols) + " | seconds |",
             "|" + "---|" * (len(cols) + 4)]
    for r in rows_out:
        attn, kv, idx = r["row"].split("/")
        cells = []
        for c in cols:
            ok, n = r["cells"].get(c, (0, 0))
            cells.append(f"{ok}/{n}" if n else "-")
        lines.append(f"| {attn} | {kv} | {idx} | " + " | ".join(cells) + f" | {r['seconds']:.0f} |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--fp4serve")
    ap.add_argument("--engine", choices=["serve", "generate"], default="serve")
    ap.add_argument("--lengths", default="1024,4096,16384,32768")
    ap.add_argument("--samples", type=int, default=8, help="retrieval questions per length and haystack")
    ap.add_argument("--arith-samples", type=int, default=3, help="arithmetic questions per length and haystack")
    ap.add_argument("--short-samples", type=int, default=4, help="context-free problems per operation")
    ap.add_argument("--haystacks", type=int, default=1)
    ap.add_argument("--rows", default="all", help="all, main, or a list like msa/nvfp4/fp8,dense/auto/-")
    ap.add_argument("--chat", action="store_true", help="ask in ChatML instead of plain text")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=0, help="engine threads (default: all cores)")
    ap.add_argument("--concurrency", type=int, default=4, help="questions in flight per row")
    ap.add_argument("--max-minutes", type=float, default=0, help="start no row after this (0: no limit)")
    args = ap.parse_args(argv)
    args.lengths = sorted(int(n) for n in args.lengths.split(","))
    binary = find_fp4serve(args.fp4serve)
    with open(os.path.join(args.model, "config.json")) as f:
        config = json.load(f)
    tasks = config.get("fp4serve_train", {}).get("tasks") or {}
    cfg = data.DataConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in tasks.items()})
    questions = data.eval_prompts(args.seed, cfg, args.lengths, args.haystacks, args.samples,
                                  args.arith_samples, args.short_samples, args.chat)
    os.makedirs(args.out, exist_ok=True)
    start, rows_out = time.time(), []
    run = run_row_serve if args.engine == "serve" else run_row_generate
    with tempfile.TemporaryDirectory() as work:
        dense_dir = None
        for row in parse_rows(args.rows):
            attn, kv, idx = row.split("/")
            if args.max_minutes and time.time() - start > 60 * args.max_minutes:
                print(f"[eval] {row}: not run (--max-minutes {args.max_minutes} reached)", flush=True)
                continue
            if attn == "dense" and dense_dir is None:
                dense_dir = dense_copy(args.model, work)
            t0 = time.time()
            results = run(binary, dense_dir if attn == "dense" else args.model, kv, idx, questions, args)
            cells = {}
            for q in results:
                ok, n = cells.get(cell_key(q), (0, 0))
                cells[cell_key(q)] = (ok + int(q["got"] == q["answer"]), n + 1)
            entry = {"row": row, "seconds": time.time() - t0, "cells": cells,
                     "questions": [{k: v for k, v in q.items() if k != "prompt"} | {"prompt_tokens": len(q["prompt"])}
                                   for q in results]}
            rows_out.append(entry)
            summary = " ".join(f"{k} {ok}/{n}" for k, (ok, n) in sorted(cells.items()))
            print(f"[eval] {row}: {summary} ({entry['seconds']:.0f} s)", flush=True)
            md = table(rows_out, args.lengths)
            with open(os.path.join(args.out, "eval.md"), "w") as f:
                f.write(f"Model {args.model}, engine {args.engine}, seed {args.seed}, {args.haystacks} haystack(s); "
                        f"cells are right/asked.\n\n{md}\n")
            with open(os.path.join(args.out, "eval.json"), "w") as f:
                json.dump({"model": args.model, "args": vars(args), "rows": rows_out}, f, indent=1)
    print(table(rows_out, args.lengths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
