#!/usr/bin/env python3
"""scripts/gpu-variants without a GPU: a copy of the script in a scratch repository whose cmake
is a stand-in that builds a fake fp4serve (its bench time is the product of the numbers the
two source files held at build time) and fake kernel tests. Checks that every variant's files
are swapped in before its build, that the times come out side by side with their ratios, that
the files are put back afterwards, that --export writes a revision's files, and that a variant
missing a file is refused before anything is touched.

    gpu_variants_test.py SCRIPTS_DIR"""
import os
import shutil
import stat
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from checklist import check, summary  # noqa: E402

# The stand-in cmake: configure does nothing; a build writes kernel tests that pass and an
# fp4serve whose `bench --json F` writes one timed row of (a.cu's number x b.cuh's number) us,
# and its arguments to F.args.
FAKE_CMAKE = r"""#!/usr/bin/env bash
if [ "$1" != --build ]; then exit 0; fi
build=$2
mkdir -p "$build/tests/kernels" "$build/tools/fp4serve"
printf '#!/bin/sh\necho "[  PASSED  ] 1 test."\n' > "$build/tests/kernels/kernel_tests"
us=$(( $(cat src/x/a.cu) * $(cat src/y/b.cuh) ))
cat > "$build/tools/fp4serve/fp4serve" <<EOF
#!/usr/bin/env python3
import json, sys
out = sys.argv[sys.argv.index("--json") + 1]
row = lambda kernel, ms, gbps: {"device": "fake GPU", "kernel": kernel, "shape": "s", "ms": ms, "gbps": gbps}
json.dump([row("cudaMemcpy D2D (ceiling)", 1.0, 3000.0), row("kernel k", $us / 1000.0, 1.0)], open(out, "w"))
open(out + ".args", "w").write(" ".join(sys.argv[1:]))
EOF
chmod +x "$build/tests/kernels/kernel_tests" "$build/tools/fp4serve/fp4serve"
"""


def write(path, text, executable=False):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    if executable:
        os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)


def read(path):
    with open(path) as f:
        return f.read().strip()


def main():
    scripts = sys.argv[1]
    with tempfile.TemporaryDirectory() as root:
        for name in ("gpu-variants", "env.sh", "bench-compare"):
            os.makedirs(os.path.join(root, "scripts"), exist_ok=True)
            shutil.copy(os.path.join(scripts, name), os.path.join(root, "scripts", name))
        write(os.path.join(root, ".venv", "bin", "cmake"), FAKE_CMAKE, executable=True)
        a, b = os.path.join(root, "src", "x", "a.cu"), os.path.join(root, "src", "y", "b.cuh")
        git = lambda *args: subprocess.run(["git", "-C", root, *args], capture_output=True, text=True, check=True)
        git("init", "-q")
        write(a, "10\n")
        write(b, "1\n")
        git("add", "src")
        git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")
        write(a, "20\n")  # the working tree: 20 x 2 = 40 us
        write(b, "2\n")
        tool = ["bash", os.path.join(root, "scripts", "gpu-variants")]

        exported = subprocess.run(tool + ["--export", "HEAD", os.path.join(root, "v", "base"),
                                          "src/x/a.cu,src/y/b.cuh"], capture_output=True, text=True)
        check(exported.returncode == 0, f"--export exits 0 (got {exported.returncode}: {exported.stderr.strip()})")
        check(read(os.path.join(root, "v", "base", "a.cu")) == "10" and read(os.path.join(root, "v", "base", "b.cuh")) == "1",
              "--export writes each file as it was at the revision, under its base name")
        write(os.path.join(root, "v", "wide", "a.cu"), "30\n")  # 30 x 3 = 90 us
        write(os.path.join(root, "v", "wide", "b.cuh"), "3\n")
        write(os.path.join(root, "v", "half", "a.cu"), "5\n")  # no b.cuh

        env = dict(os.environ, KERNEL_FILTER="k", BENCH_ONLY="attention", OUT=os.path.join(root, "out"),
                   FP4_GPU_BUILD_DIR=os.path.join(root, "build"))
        refused = subprocess.run(tool + ["src/x/a.cu,src/y/b.cuh", "v/base", "v/half"], capture_output=True,
                                 text=True, env=env, cwd=root)
        check(refused.returncode == 2 and "v/half has no b.cuh" in refused.stdout,
              f"a variant without every file is refused (got {refused.returncode}: {refused.stdout.strip()})")
        check(not os.path.exists(os.path.join(root, "build")), "a refused call builds nothing")

        run = subprocess.run(tool + ["src/x/a.cu,src/y/b.cuh", "v/base", "v/wide/"], capture_output=True,
                             text=True, env=env, cwd=root)
        print(run.stdout)
        check(run.returncode == 0, f"exit status 0 (got {run.returncode}: {run.stderr.strip()})")
        row = next((l for l in run.stdout.splitlines() if l.startswith("kernel k")), "")
        check(row.split()[3:] == ["40.0", "10.0", "90.0", "0.250", "2.250"],
              f"tree 40 us, base 10, wide 90, and their ratios to the tree (got {row!r})")
        check("base us" in run.stdout and "wide us" in run.stdout, "variants labelled by their folders' names")
        check(read(a) == "20" and read(b) == "2", "the files are put back as the tree had them")

        single = os.path.join(root, "v", "five.cu")
        write(single, "5\n")  # one file: a copy is a variant too (5 x 2 = 10 us)
        run = subprocess.run(tool + ["src/x/a.cu", "v/five.cu"], capture_output=True, text=True,
                             env=dict(env, BENCH_BATCH="32,128"), cwd=root)
        row = next((l for l in run.stdout.splitlines() if l.startswith("kernel k")), "")
        check(run.returncode == 0 and row.split()[3:] == ["40.0", "10.0", "0.250"],
              f"one file and a variant copy of it: 40 and 10 us (got {run.returncode}, {row!r})")
        check(read(a) == "20", "the single file is put back")
        args = read(os.path.join(root, "out", "bench-five.json.args"))
        check(args.startswith("bench --only attention --batch 32 --batch 128 --json"),
              f"BENCH_BATCH's sizes reach fp4serve bench as --batch (got {args!r})")
    return summary("gpu_variants")


if __name__ == "__main__":
    sys.exit(main())
