"""A plain torch bf16 matmul benchmark, to hold `kiln verify`'s throughput figure against.

Run on the GPU machine: ``python3 scripts/gpu/bench_bf16.py [N] [ITERS]`` prints one JSON object.
Method of docs/reference measured.md: random bf16 N x N operands, 3 warm-up products, then ITERS
products timed between two CUDA events (mean); the median of per-product event timings is given too.
"""

import json
import statistics
import sys

import torch


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 8192
    iters = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        a @ b
    end.record()
    end.synchronize()
    mean_s = start.elapsed_time(end) / 1000 / iters
    per = []
    for _ in range(iters):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        a @ b
        e.record()
        e.synchronize()
        per.append(s.elapsed_time(e) / 1000)
    flops = 2.0 * n**3
    print(json.dumps({
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "n": n,
        "iterations": iters,
        "tflops_mean": round(flops / mean_s / 1e12, 1),
        "tflops_median_per_product": round(flops / statistics.median(per) / 1e12, 1),
    }))


if __name__ == "__main__":
    main()
