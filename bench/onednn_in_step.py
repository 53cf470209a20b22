#!/usr/bin/python3
"""oneDNN's products in a training step against the same products alone.

Reads the exec lines of a run under ONEDNN_VERBOSE=1 (its last 60%, past the warm-up), sums the
time of each matmul and inner-product shape, and times the same shape alone in this Python's
torch (the wheel the build links), repeated with the operands in cache, on 2 threads and on 1:
how much slower the products run inside a step, and how much oneDNN gains from a second thread.

    ONEDNN_VERBOSE=1 build/bigbatch train -s gpt.embed=512 -s gpt.heads=8 -s gpt.context=256 \\
        -s model.precision=bf16 -s train.steps=8 -s train.eval_every=0 -s checkpoint.every=0 \\
        -s sample.bytes=0 --run-dir /tmp/vb > /tmp/vb.log
    ~/.cache/bigbatch/torch-2.15.0/bin/python bench/onednn_in_step.py /tmp/vb.log
"""
import collections
import re
import sys
import time

import torch


def shapes_in_step(log):
    """(kind, problem, layout) -> [calls, total ms] over the last 60% of the exec lines."""
    rows = [line.strip().split(",") for line in open(log)
            if line.startswith("onednn_verbose,v1,primitive,exec")]
    totals = collections.defaultdict(lambda: [0, 0.0])
    for row in rows[len(rows) * 2 // 5:]:
        kind, memory, problem, ms = row[5], row[8], row[-2], float(row[-1])
        if kind not in ("matmul", "inner_product"):
            continue
        layout = " ".join(m.split(":")[0] + ":" + m.split(":")[4] for m in memory.split(" ")
                          if m.count(":") >= 4)
        totals[(kind, problem, layout)][0] += 1
        totals[(kind, problem, layout)][1] += ms
    return totals


def operands(kind, problem, layout):
    """(flops, a function running the product alone) for a bf16 shape of the log."""
    bf16 = lambda *s: torch.randn(*s).bfloat16()  # noqa: E731
    if kind == "inner_product":  # mb{M}ic{K}oc{N}, bias inside (mkldnn::_linear_pointwise)
        m, k, n = map(int, re.match(r"mb(\d+)ic(\d+)oc(\d+)", problem).groups())
        x, w, b = bf16(m, k), bf16(n, k), bf16(n)
        linear = torch.ops.mkldnn._linear_pointwise
        return 2 * m * k * n, lambda: linear(x, w, b, "none", [], "")
    (m, k), (_, n) = [tuple(map(int, d.split("x")[-2:])) for d in problem.split(":")[:2]]
    a = bf16(k, m).t() if "src:ba" in layout else bf16(m, k)
    b = bf16(n, k).t() if "wei:ba" in layout else bf16(k, n)
    return 2 * m * k * n, lambda: torch.mm(a, b)


def alone_ms(run, threads, reps=40):
    torch.set_num_threads(threads)
    for _ in range(5):
        run()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2] * 1e3


def main():
    totals = shapes_in_step(sys.argv[1])
    print("| product | calls | share | in the step | alone, 2 threads | alone, 1 thread |")
    print("|---|---|---|---|---|---|")
    everything = sum(ms for _, ms in totals.values())
    for (kind, problem, layout), (calls, ms) in sorted(totals.items(), key=lambda x: -x[1][1]):
        flops, run = operands(kind, problem, layout)
        two, one = alone_ms(run, 2), alone_ms(run, 1)
        print(f"| {kind} {problem} {layout} | {calls} | {100 * ms / everything:.1f}% "
              f"| {flops * calls / ms / 1e6:,.0f} GFLOP/s | {flops / two / 1e6:,.0f} "
              f"| {flops / one / 1e6:,.0f} |")


if __name__ == "__main__":
    main()
