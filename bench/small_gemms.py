#!/usr/bin/python3
"""One thread's torch.mm time on the GPT's micro-batch-2 shapes (128 rows) and on 1024^3.

Run it alone at OPENBLAS_NUM_THREADS=1 and =2, and as two processes at 1 at once, to see how
much OpenBLAS's second thread gains against a second independent pass (docs/BENCHMARKS.md,
"Micro-batch 2"):

    OPENBLAS_CORETYPE=SkylakeX OPENBLAS_NUM_THREADS=1 bench/small_gemms.py
    OPENBLAS_CORETYPE=SkylakeX OPENBLAS_NUM_THREADS=2 bench/small_gemms.py
    (OPENBLAS_CORETYPE=SkylakeX OPENBLAS_NUM_THREADS=1 bench/small_gemms.py > a.txt &
     OPENBLAS_CORETYPE=SkylakeX OPENBLAS_NUM_THREADS=1 bench/small_gemms.py > b.txt; wait)
"""
import time

import torch

torch.set_num_threads(1)
SHAPES = [(128, 128, 384), (128, 128, 128), (128, 512, 128), (128, 128, 512), (1024, 1024, 1024)]


def seconds_per_mm(m, k, n, reps):
    a, b, c = torch.randn(m, k), torch.randn(k, n), torch.empty(m, n)
    for _ in range(10):
        torch.mm(a, b, out=c)
    start = time.perf_counter()
    for _ in range(reps):
        torch.mm(a, b, out=c)
    return (time.perf_counter() - start) / reps


for m, k, n in SHAPES:
    dt = seconds_per_mm(m, k, n, 20 if m == 1024 else 2000)
    print(f"{m}x{k}x{n}: {dt * 1e6:.1f} us  {2 * m * k * n / dt / 1e9:.1f} GFLOP/s", flush=True)
