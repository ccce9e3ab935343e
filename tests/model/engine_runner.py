"""Runs `fp4serve generate` the way the model comparison tests need it and checks what comes
back: the JSON line on stdout and the float32 [steps, vocab] logits dump."""
import json
import os
import subprocess

import numpy as np


class EngineError(Exception):
    pass


def _tail(text, lines=15):
    return "\n".join(text.strip().splitlines()[-lines:])


def run(args, what, timeout=600):
    """Runs the binary; an EngineError names the step and carries its exit status and stderr."""
    try:
        r = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise EngineError(f"{what}: {args[0]} does not exist (build the fp4serve target)")
    except subprocess.TimeoutExpired:
        raise EngineError(f"{what}: no answer after {timeout} s")
    if r.returncode != 0:
        hint = " (the subcommand is not built yet)" if "not implemented yet" in r.stderr else ""
        raise EngineError(f"{what} exited {r.returncode}{hint}\n  command: {' '.join(args)}\n"
                          f"  stderr:\n{_tail(r.stderr)}")
    return r


def generate(binary, model_dir, prompt, max_tokens, vocab, workdir, kv_cache_dtype="auto", timeout=600,
             device="cpu"):
    """Greedy generation with logits dump. Returns (token_ids [n], logits [n, vocab] float64).
    The CPU engine by default: the references test the oracle, whose tolerances they derive
    (the GPU engine is held to the CPU engine by tests/gpu)."""
    prompt_file = os.path.join(workdir, "prompt_ids.txt")
    dump = os.path.join(workdir, f"logits_{kv_cache_dtype}.f32")
    with open(prompt_file, "w") as f:
        f.write(" ".join(str(int(t)) for t in prompt) + "\n")
    if os.path.exists(dump):
        os.remove(dump)
    what = f"fp4serve generate (--kv-cache-dtype {kv_cache_dtype}, {len(prompt)} prompt tokens)"
    r = run([binary, "generate", "--model", model_dir, "--prompt-ids-file", prompt_file,
             "--max-tokens", str(max_tokens), "--temperature", "0", "--ignore-eos",
             "--kv-cache-dtype", kv_cache_dtype, "--device", device, "--json", "--dump-logits", dump],
            what, timeout)
    lines = [ln for ln in r.stdout.splitlines() if ln.strip()]
    try:
        reply = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        raise EngineError(f"{what}: stdout does not end with a JSON object:\n{_tail(r.stdout)}")
    ids = reply.get("token_ids")
    if not isinstance(ids, list) or len(ids) != max_tokens:
        raise EngineError(f"{what}: token_ids is {ids!r}, expected {max_tokens} ids (--ignore-eos)")
    for key, want in (("prompt_tokens", len(prompt)), ("completion_tokens", max_tokens)):
        if reply.get(key) != want:
            raise EngineError(f"{what}: {key} is {reply.get(key)!r}, expected {want}")
    if not os.path.exists(dump):
        raise EngineError(f"{what}: --dump-logits wrote no file {dump}")
    logits = np.fromfile(dump, "<f4")
    if logits.size != max_tokens * vocab:
        raise EngineError(f"{what}: {dump} holds {logits.size} floats, expected {max_tokens} x {vocab}")
    logits = logits.reshape(max_tokens, vocab).astype(np.float64)
    if not np.all(np.isfinite(logits)):
        raise EngineError(f"{what}: the logits dump has non-finite values")
    return np.array(ids, np.int64), logits


def relative_error(engine, reference):
    """Per step max |engine - reference| over the vocabulary, divided by that step's max |reference|."""
    return np.abs(engine - reference).max(axis=1) / np.abs(reference).max(axis=1)


def top2_margin(logits):
    """Gap between the largest and second-largest logit of each row."""
    part = np.sort(logits, axis=1)
    return part[:, -1] - part[:, -2]
