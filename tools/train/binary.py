"""Where the fp4serve binary is. Its own module, free of PyTorch, so that the evaluation (and
the CI test built on it) runs where PyTorch is not installed."""
import os

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def find_fp4serve(explicit=None):
    """--fp4serve, else $FP4_BUILD_DIR's, else build/'s binary."""
    candidates = [explicit] if explicit else []
    if os.environ.get("FP4_BUILD_DIR"):
        candidates.append(os.path.join(os.environ["FP4_BUILD_DIR"], "tools/fp4serve/fp4serve"))
    candidates.append(os.path.join(REPO, "build/tools/fp4serve/fp4serve"))
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    raise FileNotFoundError(f"no fp4serve binary among {candidates}; build it (bash scripts/build fp4serve) "
                            "or give --fp4serve")
