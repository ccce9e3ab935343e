#!/usr/bin/env python3
"""The fp4serve command line: every subcommand has --help, bad input exits with status 2 and a
message."""
import os
import subprocess
import sys

BINARY = sys.argv[1]
SUBCOMMANDS = ["serve", "generate", "plan", "convert", "bench", "init-model"]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from checklist import check, summary  # noqa: E402


def run(*args):
    return subprocess.run([BINARY, *args], capture_output=True, text=True, timeout=60)


top = run("--help")
check(top.returncode == 0, "--help exits 0")
for sub in SUBCOMMANDS:
    check(sub in top.stdout, f"--help lists {sub}")
    r = run(sub, "--help")
    check(r.returncode == 0 and "Usage" in r.stdout, f"{sub} --help exits 0 and prints usage")
r = run("serve", "--model", "/no/such/model-dir")
check(r.returncode == 2 and "/no/such/model-dir" in r.stderr, "serve names a missing model directory and exits 2")
r = run("serve", "--port", "70000")
check(r.returncode == 2 and "--port" in r.stderr, "serve refuses a port out of range")
# convert without a mode names both of its modes.
r = run("convert")
check(r.returncode == 2 and "--from-llama2c" in r.stderr and "--experts nvfp4" in r.stderr,
      "convert without a mode names its modes and exits 2")
r = run()
check(r.returncode == 2, "no subcommand exits 2")
r = run("plan", "--no-such-flag")
check(r.returncode == 2 and "no-such-flag" in r.stderr, "unknown flag exits 2 and names it")
r = run("plan", "--model", "no-such-model")
check(r.returncode == 2 and "no-such-model" in r.stderr, "an fp4::Error exits 2 and names the value")
r = run("generate", "--model", "/no/such/model-dir", "--prompt", "hi")
check(r.returncode == 2 and "/no/such/model-dir" in r.stderr, "generate names a missing model directory and exits 2")
r = run("generate", "--prompt", "hi")
check(r.returncode == 2 and "--model" in r.stderr, "generate without --model exits 2 and names the flag")
# bench --batch picks sizes the selected sections sweep; anything else is refused before any
# benchmark runs.
r = run("bench", "--only", "attention", "--batch", "3")
check(r.returncode == 2 and "--batch 3" in r.stderr and "attention 1, 8, 32, 128" in r.stderr,
      "bench --batch refuses a size the section does not sweep and names the sizes")
r = run("bench", "--only", "cpu", "--batch", "8")
check(r.returncode == 2 and "none is selected" in r.stderr, "bench --batch with no section that sweeps sizes exits 2")
r = run("bench", "--batch", "0")
check(r.returncode == 2 and "--batch" in r.stderr, "bench --batch 0 exits 2")
r = run("bench", "--only", "attention", "--only", "experts", "--batch", "16", "--batch", "128", "--cpu-only")
check(r.returncode == 0, "bench --batch takes sizes swept by any selected section")
# bench --attention-splits forces the sparse attention's split count, so it needs that section.
r = run("bench", "--only", "indexer", "--attention-splits", "4")
check(r.returncode == 2 and "--attention-splits" in r.stderr and "attention section" in r.stderr,
      "bench --attention-splits without the attention section exits 2")
r = run("bench", "--only", "attention", "--attention-splits", "17")
check(r.returncode != 0 and "--attention-splits" in r.stderr, "bench --attention-splits past 16 is refused")
r = run("bench", "--only", "attention", "--attention-splits", "16", "--batch", "1", "--cpu-only")
check(r.returncode == 0, "bench --attention-splits takes 1-16 with the attention section")
# bench --profile-ops times the model section's layer op by op, so it needs that section.
r = run("bench", "--only", "indexer", "--profile-ops")
check(r.returncode == 2 and "--profile-ops" in r.stderr and "model section" in r.stderr,
      "bench --profile-ops without the model section exits 2")
r = run("bench", "--only", "model", "--profile-ops", "--batch", "1", "--cpu-only")
check(r.returncode == 0, "bench --profile-ops takes the model section")
r = run("--version")
check(r.returncode == 0 and "fp4serve" in r.stdout, "--version")

sys.exit(summary())
