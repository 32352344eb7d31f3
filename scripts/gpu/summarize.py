"""Print a short summary of what scripts/gpu/verify_on_gpu.sh wrote (the device tool shows the tail).

``python3 scripts/gpu/summarize.py OUTDIR``
"""

import json
import os
import sys


def load(path: str) -> dict | None:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        print(f"{path}: {e}")
        return None


def table(report: dict, title: str) -> None:
    print(f"== {title}: {report['status']} (exit {report['exit_code']}) {report['summary']}")
    for c in report["checks"]:
        print(f"  {c['status']:4} {c['name']:<16} {c['seconds']:7.2f}s  {c['reason'][:400]}")


def main() -> None:
    out = sys.argv[1]
    main_report = load(os.path.join(out, "verify.json"))
    bench = load(os.path.join(out, "bench-bf16.json"))
    if main_report:
        table(main_report, "checks.py --json")
        tp = next((c for c in main_report["checks"] if c["name"] == "throughput"), None)
        if tp and tp["status"] != "skip" and bench and "devices" in tp["details"]:
            row = tp["details"]["devices"][0]
            mine = row["tflops"]
            plain = bench["tflops_mean"]
            ratio = mine / plain
            verdict = "within" if abs(ratio - 1) <= 0.15 else "NOT within"
            print(f"== bf16 {bench['n']}^3: checks.py {mine} TFLOP/s "
                  f"(sustained {row['tflops_sustained']}) vs plain torch "
                  f"{plain} (mean of {bench['iterations']}; per-product median "
                  f"{bench['tflops_median_per_product']}): ratio {ratio:.3f}, {verdict} 15%")
    fixture = load(os.path.join(out, "verify-fixture.json"))
    if fixture:
        table(fixture, "checks.py with the sm_80-only fixture")
    launches = os.path.join(out, "launch.jsonl")
    if os.path.exists(launches):
        print("== kernel launches, after the reports:")
        with open(launches) as f:
            for line in f:
                print("  " + line.strip())


if __name__ == "__main__":
    main()
