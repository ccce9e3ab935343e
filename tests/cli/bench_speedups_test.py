#!/usr/bin/env python3
"""scripts/bench-speedups on a made-up `fp4serve bench --json` file whose times give known
ratios: the indexer and the attention tables, indexer + attention per layer (graph rows with
graph rows only), the experts' NVFP4 against BF16 weights, and the shapes and families that lack
a format left out.

    bench_speedups_test.py SCRIPT"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from checklist import check, summary  # noqa: E402

COPY = 4000.0


def row(kernel, shape, ms, device="NVIDIA H200", gbps=COPY / 4):
    return {"device": device, "kernel": kernel, "shape": shape, "ms": ms, "gbps": gbps,
            "copy_gbps": COPY, "bytes": 1.0, "validated": False}


def main():
    script = sys.argv[1]
    rows = [row("memcpy, all threads (ceiling)", "8192x4096", 1.0, device="cpu (16 threads)")]
    # Indexer at one full shape (1.0 : 1.5 : 2.0 ms) and one that lacks BF16.
    for fmt, ms in (("nvfp4", 1.0), ("fp8", 1.5), ("bf16", 2.0)):
        rows.append(row(f"indexer top-16 {fmt} tensor cores", "batch 128 x 256K", ms))
    for fmt, ms in (("nvfp4", 0.5), ("fp8", 0.7)):
        rows.append(row(f"indexer top-16 {fmt} tensor cores", "batch 8 x 8K", ms))
    # Attention at the same batch and context (0.25 : 0.3 : 0.4 ms).
    for fmt, ms in (("nvfp4", 0.25), ("fp8", 0.3), ("bf16", 0.4)):
        rows.append(row(f"paged attention sparse {fmt}", "b128 64/4x128 top16 of 256K", ms))
    # The same with 16-bit operands, its own family (0.125 : 0.2 : 0.3 ms).
    for fmt, ms in (("nvfp4", 0.125), ("fp8", 0.2), ("bf16", 0.3)):
        rows.append(row(f"paged attention sparse {fmt} 16-bit operands", "b128 64/4x128 top16 of 256K", ms))
    # Per call in a CUDA graph: indexer 0.8 : 1.4 : 1.9, 16-bit attention 0.1 : 0.18 : 0.29 ms.
    for fmt, ms in (("nvfp4", 0.8), ("fp8", 1.4), ("bf16", 1.9)):
        rows.append(row(f"indexer top-16 {fmt} tensor cores (graph)", "batch 128 x 256K", ms))
    for fmt, ms in (("nvfp4", 0.1), ("fp8", 0.18), ("bf16", 0.29)):
        rows.append(row(f"paged attention sparse {fmt} 16-bit operands (graph)", "b128 64/4x128 top16 of 256K", ms))
    # Routed experts: NVFP4 weights against BF16 weights, no FP8 row (0.1 : 0.35 ms).
    for fmt, ms in (("nvfp4", 0.1), ("bf16", 0.35)):
        rows.append(row(f"{fmt} experts gate+up", "b16 top4 of 128, 62 active, [6144, 6144]", ms))
    # A family with one format only: no table.
    rows.append(row("nvfp4 quantize bf16", "8192x4096", 0.3))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bench.json")
        with open(path, "w") as f:
            json.dump(rows, f)
        out = subprocess.run([sys.executable, script, path], capture_output=True, text=True)
    check(out.returncode == 0, f"exit status 0 (got {out.returncode}: {out.stderr.strip()})")
    lines = out.stdout.splitlines()
    print(out.stdout)

    def line_with(*parts):
        return next((l for l in lines if all(p in l for p in parts)), None)

    indexer = line_with("batch 128 x 256K", "1000.0")
    check(indexer is not None and indexer.split()[-2:] == ["1.50", "2.00"],
          f"indexer row: FP8/NVFP4 1.50 and BF16/NVFP4 2.00 (got {indexer!r})")
    check(line_with("batch 8 x 8K") is None, "a shape without BF16 is left out")
    attention = line_with("b128 64/4x128 top16 of 256K", "250.0")
    check(attention is not None and attention.split()[-2:] == ["1.20", "1.60"],
          f"attention row: 1.20 and 1.60 (got {attention!r})")
    attention16 = line_with("b128 64/4x128 top16 of 256K", "125.0")
    check(attention16 is not None and attention16.split()[-2:] == ["1.60", "2.40"],
          f"16-bit operands attention row: 1.60 and 2.40 (got {attention16!r})")
    check(line_with("paged attention sparse 16-bit operands: time") is not None,
          "16-bit operands are a family of their own")
    together = line_with("batch 128 x 256K", "1250.0")
    check(together is not None and together.split()[-2:] == ["1.44", "1.92"],
          f"indexer + attention: 1800/1250 = 1.44 and 2400/1250 = 1.92 (got {together!r})")
    together16 = line_with("batch 128 x 256K", "1125.0")
    check(together16 is not None and together16.split()[-2:] == ["1.51", "2.04"],
          f"indexer + 16-bit attention: 1700/1125 = 1.51 and 2300/1125 = 2.04 (got {together16!r})")
    graph_together = line_with("batch 128 x 256K", " 900.0", "1580.0")
    check(graph_together is not None and graph_together.split()[-2:] == ["1.76", "2.43"],
          f"graph indexer + graph attention: 1580/900 = 1.76 and 2190/900 = 2.43 (got {graph_together!r})")
    mixed = (line_with("batch 128 x 256K", "925.0"), line_with("batch 128 x 256K", "1100.0"))
    check(mixed == (None, None), f"a graph row is never added to a host-call row (got {mixed!r})")
    experts = line_with("62 active")
    check(experts is not None and experts.split()[-1] == "3.50",
          f"experts row: BF16/NVFP4 0.35/0.1 = 3.50 (got {experts!r})")
    check(not any("quantize" in l for l in lines), "a family with one format gets no table")
    check(indexer is not None and indexer.count("( 25%)") == 3,
          f"% of copy: each row's GB/s over the copy ceiling, 25% (got {indexer!r})")
    return summary("bench_speedups")


if __name__ == "__main__":
    sys.exit(main())
