#!/usr/bin/env python3
"""Runs every tools/train test (CPU only, no trained model needed):

    .venv/bin/python tools/train/tests/run_tests.py [FP4SERVE]

FP4SERVE (or the FP4SERVE environment variable, else $FP4_BUILD_DIR's or build/'s binary) is
the fp4serve the engine and init-model comparisons run; without one they are skipped. Ends with
'N passed, N failed, N skipped'."""
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    if len(sys.argv) > 1:
        os.environ["FP4SERVE"] = os.path.abspath(sys.argv[1])
    sys.path.insert(0, HERE)
    suite = unittest.defaultTestLoader.discover(HERE, pattern="test_*.py")
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    failed = len(result.failures) + len(result.errors)
    skipped = len(result.skipped)
    print(f"{result.testsRun - failed - skipped} passed, {failed} failed, {skipped} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
