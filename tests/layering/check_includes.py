#!/usr/bin/env python3
"""Checks that every #include "layer/..." in src/ points to the same or a lower layer.

The link graph (cmake/Layers.cmake) stops a library from linking an upper layer; this test
stops the quieter mistake of including an upper layer's header-only code. Ranks mirror
cmake/Layers.cmake; the CPU and CUDA backends share a rank and may not include each other.
"""
import pathlib
import re
import sys

RANKS = {"core": 0, "formats": 1, "kvcache": 2, "backend": 3, "backend_cpu": 4, "backend_cuda": 4,
         "model": 5, "tokenizer": 5, "sampling": 5, "chat": 5, "scheduler": 6, "engine": 7, "server": 8}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def layer_of(parts):
    """Layer of a path given as parts relative to src/ (['backend', 'cpu', 'x.h'] -> backend_cpu)."""
    if parts[0] == "backend" and len(parts) > 2 and parts[1] in ("cpu", "cuda"):
        return "backend_" + parts[1]
    return parts[0]


def main(src):
    errors = []
    for path in sorted(src.rglob("*")):
        if path.suffix not in (".h", ".cpp", ".cu", ".cuh", ".inl"):
            continue
        own = layer_of(path.relative_to(src).parts)
        if own not in RANKS:
            errors.append(f"{path}: folder '{own}' is not a known layer")
            continue
        for target in INCLUDE.findall(path.read_text()):
            parts = target.split("/")
            dep = layer_of(parts)
            if len(parts) == 1:
                continue  # a header beside the file (generated sources)
            if dep not in RANKS:
                errors.append(f"{path}: includes {target}, which is outside src/'s layers")
                continue
            if dep == own:
                continue
            if RANKS[dep] >= RANKS[own]:
                errors.append(f"{path}: includes {target} ({dep}, rank {RANKS[dep]}) "
                              f"from {own} (rank {RANKS[own]}): dependencies point down")
    for e in errors:
        print(e)
    print(f"{0 if errors else 1} passed, {1 if errors else 0} failed")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(pathlib.Path(sys.argv[1])))
