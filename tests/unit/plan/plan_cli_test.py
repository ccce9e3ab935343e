"""Runs the built fp4serve binary: `plan --json` output, the table, and flag errors.

Usage: plan_cli_test.py <path to fp4serve>. Standard library only.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

LAUNCH = ["--gpu", "b300", "--dep", "4", "--max-model-len", "256k"]


def run(binary, args, cwd):
    return subprocess.run([binary, "plan", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=60)


def check(condition, message):
    if not condition:
        raise AssertionError(message)


def write_safetensors(path, tensors):
    """tensors: name -> (dtype, shape, bytes per element). Data is zeros."""
    header, offset = {}, 0
    for name, (dtype, shape, size) in tensors.items():
        n = size
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + bytes(offset))
    return offset


def check_checkpoint(binary, cwd):
    """--checkpoint: sizes from the headers, config.json from the same directory."""
    ckpt = os.path.join(cwd, "tiny-moe")
    os.mkdir(ckpt)
    config = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 8,
              "num_key_value_heads": 2, "vocab_size": 100, "num_local_experts": 4,
              "num_experts_per_tok": 2, "intermediate_size": 32,
              "max_position_embeddings": 4096}
    with open(os.path.join(ckpt, "config.json"), "w") as f:
        json.dump(config, f)
    rest = write_safetensors(os.path.join(ckpt, "model-00001-of-00002.safetensors"), {
        "model.embed_tokens.weight": ("BF16", [100, 64], 2),
        "model.layers.0.self_attn.q_proj.weight": ("F8_E4M3", [64, 64], 1),
        "model.layers.0.input_layernorm.weight": ("BF16", [64], 2),
        "lm_head.weight": ("BF16", [100, 64], 2),
    })
    experts = write_safetensors(os.path.join(ckpt, "model-00002-of-00002.safetensors"), {
        f"model.layers.{l}.block_sparse_moe.experts.{e}.w1.weight": ("U8", [32, 32], 1)
        for l in range(2) for e in range(4)
    })
    p = run(binary, ["--checkpoint", ckpt, "--dep", "2", "--gpu-memory-gb", "1",
                     "--reserve-gb", "0.1", "--max-model-len", "1k", "--json"], cwd)
    check(p.returncode == 0, f"--checkpoint failed: {p.stderr}")
    j = json.loads(p.stdout)
    check(j["weights_bytes_total"] == rest + experts, j["weights_bytes_total"])
    check(j["weights_bytes_per_gpu"] == rest + experts // 2, j["weights_bytes_per_gpu"])
    check(j["quantization"] is None, j["quantization"])
    # 2 layers x K and V x 2 heads x 8 dims x 2 bytes.
    check(j["kv_bytes_per_token"] == 2 * 2 * 2 * 8 * 2, j["kv_bytes_per_token"])
    check(j["index_cache_bytes_per_token"] == 0, j["index_cache_bytes_per_token"])

    # A shape whose element count wraps a 64-bit product to 0 must not pass as an empty tensor.
    bad = os.path.join(cwd, "wrapping")
    os.mkdir(bad)
    with open(os.path.join(bad, "config.json"), "w") as f:
        json.dump(config, f)
    header = json.dumps({"w": {"dtype": "BF16", "shape": [2**32, 2**32],
                               "data_offsets": [0, 0]}}).encode()
    with open(os.path.join(bad, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header)
    p = run(binary, ["--checkpoint", bad, "--gpu-memory-gb", "1"], cwd)
    check(p.returncode == 2 and p.stdout == "", f"exit {p.returncode}: {p.stdout}{p.stderr}")
    for text in ("model.safetensors", "tensor 'w'", "[4294967296,4294967296]", "64-bit"):
        check(text in p.stderr, f"stderr {p.stderr!r} lacks {text!r}")


def check_published(binary, cwd):
    """Computed weights are reported next to the preset's published checkpoint size."""
    published = {}
    for model, kv, size in (("minimax-m3", "fp8", 451_500_000_000),
                            ("minimax-m3.1-flash", "nvfp4", 250_116_419_880)):
        p = run(binary, ["--model", model, "--kv-cache-dtype", kv, "--json", *LAUNCH], cwd)
        check(p.returncode == 0, p.stderr)
        j = json.loads(p.stdout)
        check(j["weights_bytes_published"] == size, j["weights_bytes_published"])
        diff = j["weights_bytes_total"] - size
        check(j["weights_published_diff_bytes"] == diff, j["weights_published_diff_bytes"])
        check(abs(j["weights_published_diff_pct"] - 100 * diff / size) < 1e-9,
              j["weights_published_diff_pct"])
        check(abs(j["weights_published_diff_pct"]) < 2, j["weights_published_diff_pct"])
        published[model] = j
    p = run(binary, ["--model", "minimax-m3", "--kv-cache-dtype", "fp8", *LAUNCH], cwd)
    for text in ("published checkpoint MiniMaxAI/MiniMax-M3-MXFP8: 451.5 GB",
                 "computed 445.79 GB vs published 451.50 GB: -5.71 GB (-1.26%)"):
        check(text in p.stdout, f"table lacks {text!r}:\n{p.stdout}")
    # Another scheme, or declared weights, have no published checkpoint to compare with.
    for extra in (["--quantization", "bf16"], ["--weights-bytes", "451.5GB"]):
        p = run(binary, ["--model", "minimax-m3", "--json", "--gpu-memory-gb", "1000",
                         *LAUNCH[2:], *extra], cwd)
        check(p.returncode == 0, p.stderr)
        check(json.loads(p.stdout)["weights_bytes_published"] is None, extra)


def check_bad_input(binary, cwd):
    """Every bad input is an error naming the field and the numbers, with exit status 2."""
    broken = os.path.join(cwd, "broken.json")
    with open(broken, "w") as f:
        json.dump({"num_hidden_layers": 2, "num_attention_heads": 8, "vocab_size": 100,
                   "intermediate_size": 256}, f)
    m31 = ["--model", "minimax-m3.1-flash"]
    errors = [
        (["--model", "minimax-m4"], ["'minimax-m4'", "neither a file nor a built-in preset",
                                     "minimax-m3, minimax-m3.1-flash"]),
        (["--model", "minimax-m3", "--gpu", "a100"], ["--gpu 'a100'", "h200"]),
        (["--model", broken], ["broken.json", "hidden_size is missing"]),
        ([*m31, "--dep", "4", "--tp", "2"], ["--dep 4 means"]),
        ([*m31, "--dep", "3"], ["--dep 3", "128 routed experts"]),
        ([*m31, "--dp", "3"], ["all 3 GPUs", "128 routed experts"]),
        ([*m31, "--tp", "4", "--ep", "3", "--num-gpus", "12"], ["--ep 3", "128 routed experts"]),
        ([*m31, "--tp", "4", "--ep", "8"], ["--ep 8", "4 GPUs"]),
        ([*m31, "--tp", "3"], ["--tp 3", "64 attention heads"]),
        ([*m31, "--num-gpus", "6", "--tp", "4"], ["--num-gpus 6", "--tp 4"]),
        ([*m31, "--max-model-len", "2m"], ["--max-model-len 2097152",
                                            "max_position_embeddings = 1048576"]),
        ([*m31, "--max-model-len", "12q"], ["--max-model-len '12q'"]),
        (["--model", "minimax-m3", "--checkpoint", cwd, "--weights-bytes", "1GB"],
         ["either --checkpoint or"]),
        # One H200 cannot hold M3.1-Flash's 252 GB of weights.
        ([*m31, "--gpu", "h200"], ["weights do not fit", "252.15 GB of weights per GPU",
                                   "5.77 GB reserve = 257.92 GB", "135.68 GB usable"]),
        ([*m31, "--find-min-gpus", "tp", "--dep", "4"], ["--find-min-gpus", "--dep"]),
        ([*m31, "--find-min-gpus", "ring"], ["--find-min-gpus 'ring'"]),
        # GB flags are checked before they become bytes: NaN, infinities, negative or huge
        # values are errors, not undefined conversions. A leading minus needs the = form.
        ([*m31, "--gpu-memory-gb", "nan"], ["--gpu-memory-gb nan", "finite", "more than 0"]),
        ([*m31, "--gpu-memory-gb", "0"], ["--gpu-memory-gb 0 ", "more than 0"]),
        ([*m31, "--gpu-memory-gb=-141"], ["--gpu-memory-gb -141", "more than 0"]),
        ([*m31, "--gpu-memory-gb", "1e300"], ["--gpu-memory-gb 1e+300", "at most 1,000,000"]),
        ([*m31, "--reserve-gb", "inf"], ["--reserve-gb inf", "0 or more"]),
        ([*m31, "--reserve-gb=-1"], ["--reserve-gb -1", "0 or more"]),
        ([*m31, "--runtime-overhead-gb", "-inf"], ["--runtime-overhead-gb -inf"]),
        ([*m31, "--runtime-overhead-gb", "2e6"], ["--runtime-overhead-gb 2000000",
                                                  "at most 1,000,000"]),
        ([*m31, "--gpu-memory-utilization", "nan"], ["--gpu-memory-utilization nan"]),
        ([*m31, "--max-num-batched-tokens", "0"], ["--max-num-batched-tokens 0"]),
        # Values the command line itself cannot parse exit the same way.
        ([*m31, "--gpu-memory-gb", "lots"], ["--gpu-memory-gb", "lots"]),
    ]
    for args, expected in errors:
        p = run(binary, args, cwd)
        check(p.returncode == 2, f"{args}: exit {p.returncode}, expected 2: {p.stderr}")
        check(p.stdout == "", f"{args}: printed a plan for bad input:\n{p.stdout}")
        for text in expected:
            check(text in p.stderr, f"{args}: stderr {p.stderr!r} lacks {text!r}")


def check_find_min_gpus(binary, cwd):
    """The fewest H200s for one 1M-token M3.1-Flash sequence."""
    base = ["--model", "minimax-m3.1-flash", "--gpu", "h200", "--max-model-len", "1m",
            "--kv-cache-dtype", "nvfp4", "--index-cache-dtype", "nvfp4"]
    p = run(binary, [*base, "--find-min-gpus", "tp", "--json"], cwd)
    check(p.returncode == 0, p.stderr)
    j = json.loads(p.stdout)
    check(j["min_gpu_search"]["num_gpus"] == 4 and j["parallelism"]["tp"] == 4, j["parallelism"])
    tried = j["min_gpu_search"]["tried"]
    check([t["num_gpus"] for t in tried] == [1, 2, 3], tried)
    check("weights do not fit" in tried[0]["layout_error"], tried[0])
    check(tried[1]["layout_error"] is None and 0 < tried[1]["longest_fitting_tokens"] < 2**20,
          tried[1])
    check("--tp 3" in tried[2]["layout_error"], tried[2])
    # DEP keeps a sequence on one GPU: a 1M-token BF16 cache (145 GB) fits on no count.
    p = run(binary, [*base[:-4], "--kv-cache-dtype", "bf16", "--index-cache-dtype", "bf16",
                     "--find-min-gpus", "dep"], cwd)
    check(p.returncode == 2 and "no layout of up to 1024 GPUs" in p.stderr, p.stderr)


def main():
    binary = sys.argv[1]
    # Run from an empty directory: the presets must be compiled in, not read from the tree.
    with tempfile.TemporaryDirectory() as cwd:
        p = run(binary, ["--model", "minimax-m3.1-flash", "--json", "--kv-cache-dtype", "nvfp4",
                         "--index-cache-dtype", "nvfp4", *LAUNCH], cwd)
        check(p.returncode == 0, f"plan --json failed: {p.returncode} {p.stderr}")
        j = json.loads(p.stdout)
        check(j["kv_bytes_per_token"] == 34560, j["kv_bytes_per_token"])
        check(j["index_cache_bytes_per_token"] == 4320, j["index_cache_bytes_per_token"])
        check(j["parallelism"] == {"label": "DEP4", "dp": 4, "tp": 1, "ep": 4, "num_gpus": 4},
              j["parallelism"])
        # Routed experts are a quarter per GPU; everything else is a full copy per rank.
        experts = next(c for c in j["weights"] if c["class"] == "routed experts")
        check(experts["bytes_per_gpu"] * 4 == experts["bytes_total"], experts)
        check(j["weights_bytes_per_gpu"] ==
              j["weights_bytes_total"] - experts["bytes_total"] + experts["bytes_per_gpu"],
              "per-GPU weights are not replica + experts/4")
        check(j["kv_budget_bytes_per_gpu"] ==
              j["usable_bytes_per_gpu"] - j["weights_bytes_per_gpu"] - j["reserve"]["bytes"],
              "the KV budget is not usable - weights - reserve")
        pages = j["kv_budget_bytes_per_gpu"] // j["page_bytes_per_gpu"]
        check(j["pages_per_rank"] == pages, "pages")
        check(j["pages_per_sequence"] == 2048, j["pages_per_sequence"])
        check(j["max_concurrency_per_rank"] == pages // 2048, "concurrency per rank")
        check(j["max_concurrency_total"] == 4 * j["max_concurrency_per_rank"], "total")
        check(j["max_concurrency_total"] == 68, j["max_concurrency_total"])
        check(j["vllm_log_lines"][0] == f"GPU KV cache size: {pages * 128:,} tokens",
              j["vllm_log_lines"])

        # The launch report's accounting (no index cache): 28 -> 76.
        totals = []
        for model, kv in (("minimax-m3", "fp8"), ("minimax-m3.1-flash", "nvfp4")):
            p = run(binary, ["--model", model, "--kv-cache-dtype", kv, "--index-cache-dtype",
                             "none", "--json", *LAUNCH], cwd)
            check(p.returncode == 0, p.stderr)
            totals.append(json.loads(p.stdout)["max_concurrency_total"])
        check(totals == [28, 76], totals)

        p = run(binary, ["--model", "minimax-m3", "--kv-cache-dtype", "fp8", *LAUNCH], cwd)
        check(p.returncode == 0, p.stderr)
        for text in ("Maximum concurrency for 262,144 tokens per request: ",
                     "GPU KV cache size: ", "max concurrent sequences: 6 per rank x 4 rank(s) = 24",
                     "Assumptions"):
            check(text in p.stdout, f"table lacks {text!r}:\n{p.stdout}")

        check_published(binary, cwd)
        check_bad_input(binary, cwd)

        # Weights that fit with no room for one whole sequence still make a plan: it is
        # printed with the longest length that fits, and the exit status is 1.
        p = run(binary, ["--model", "minimax-m3", "--gpu", "h100", "--tp", "8"], cwd)
        check(p.returncode == 1 and "DOES NOT FIT" in p.stdout, p.stdout + p.stderr)
        check("not even one 1048576-token sequence fits" in p.stderr, p.stderr)
        p = run(binary, ["--model", "minimax-m3", "--gpu", "h100", "--tp", "8", "--json"], cwd)
        check(p.returncode == 1, f"--json: exit {p.returncode}, expected 1: {p.stderr}")
        j = json.loads(p.stdout)
        check(j["fits"] is False and j["max_concurrency_total"] == 0, j["max_concurrency_total"])
        check(0 < j["kv_cache_tokens_per_rank"] < j["max_model_len"], j["kv_cache_tokens_per_rank"])
        check_find_min_gpus(binary, cwd)
        check_checkpoint(binary, cwd)
    print("plan CLI: all checks passed")


if __name__ == "__main__":
    main()
