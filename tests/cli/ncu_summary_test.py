#!/usr/bin/env python3
"""scripts/ncu-summary on a made-up `ncu --csv --page details` output: the program's own lines
before the header are skipped, metric rows (which stop before the rule columns) are read and
rule rows are not, each (kernel, grid) shows its launch of median duration, its stalls and its
pipes largest first, and input without a header is refused.

    ncu_summary_test.py SCRIPTS_DIR"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from checklist import check, summary  # noqa: E402

HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
          '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value","Rule Name","Rule Type",'
          '"Rule Description","Estimated Speedup Type","Estimated Speedup"')


def metric(launch, grid, name, unit, value, kernel="k<3>(Args)"):
    return f'"{launch}","1","p","h","{kernel}","1","7","(128, 1, 1)","{grid}","0","9.0","S","{name}","{unit}","{value}"'


def launch_rows(launch, grid, duration, stall_wait, alu):
    return [metric(launch, grid, "Duration", "ns", duration),
            metric(launch, grid, "Issue Slots Busy", "%", "35.07"),
            metric(launch, grid, "smsp__average_warps_issue_stalled_wait_per_issue_active.ratio", "", stall_wait),
            metric(launch, grid, "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio", "", "0.62"),
            metric(launch, grid, "sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active", "%", alu),
            metric(launch, grid, "sm__inst_executed_pipe_xu_realtime.avg.pct_of_peak_sustained_active", "%", "99"),
            metric(launch, grid, "SM_A.TriageCompute.sm__inst_executed_pipe_uniform.avg.pct_of_peak_sustained_active",
                   "%", "88"),
            metric(launch, grid, "sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active", "%", "15.9"),
            f'"{launch}","1","p","h","k<3>(Args)","1","7","(128, 1, 1)","{grid}","0","9.0","S","","","",'
            '"Rule","OPT","a rule row","local","12"']


def main():
    script = os.path.join(sys.argv[1], "ncu-summary")
    with tempfile.TemporaryDirectory() as root:
        path = os.path.join(root, "ncu.csv")
        lines = ["==PROF== Connected to process 1", "device  kernel  shape", HEADER]
        lines += launch_rows(0, "(1, 4, 8)", "15,232", "1.53", "20.6")
        lines += launch_rows(1, "(8, 4, 8)", "19,000", "1.10", "30.0")
        lines += launch_rows(2, "(8, 4, 8)", "19,392", "1.59", "32.3")  # the median of three
        lines += launch_rows(3, "(8, 4, 8)", "25,000", "2.00", "40.0")
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        r = subprocess.run([sys.executable, script, path], capture_output=True, text=True)
        out = r.stdout
        print(out)
        check(r.returncode == 0, f"exit status 0 (got {r.returncode}: {r.stderr.strip()})")
        check("grid (1, 4, 8): 1 launches" in out and "grid (8, 4, 8): 3 launches, median launch 2" in out,
              "launches grouped by kernel and grid, the median launch named")
        block = out[out.index("grid (8, 4, 8)"):]
        check("Duration: 19,392 ns" in block and "Issue Slots Busy: 35.07 %" in block,
              "the median launch's figures, as ncu wrote them")
        check("stalls per issued instruction: wait 1.59, long_scoreboard 0.62" in block,
              "stalls largest first, with ncu's short names")
        check("pipes, % of peak: alu 32.3, fma 15.9" in block and "realtime" not in out and "uniform" not in out,
              "pipes largest first; section-prefixed and realtime duplicates left out")
        check("Rule" not in out and "rule row" not in out, "rule rows are not read as metrics")

        bare = os.path.join(root, "bare.txt")
        with open(bare, "w") as f:
            f.write("no profile here\n")
        r = subprocess.run([sys.executable, script, bare], capture_output=True, text=True)
        check(r.returncode != 0 and "no ncu CSV header" in r.stderr, "input without a header is refused, saying why")
    return summary("ncu_summary")


if __name__ == "__main__":
    sys.exit(main())
