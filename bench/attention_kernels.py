#!/usr/bin/env python3
"""Attention forward + backward at the default GPT's shapes (4 heads of 32, T = 64), fused
(torch.nn.functional.scaled_dot_product_attention, is_causal) against the composite bigbatch's
nn/attention runs (masked baddbmm, softmax, bmm), in fp32 and under CPU bf16 autocast, at
micro-batch 8 and 2; with --long, at micro-batch 2 and T = 128 ... 1024 instead. The numbers
behind model.attention = "auto" (docs/BENCHMARKS.md). Interleaved repetitions; prints the median
milliseconds of each. Run with the wheel's Python:

    ~/.cache/bigbatch/torch-2.15.0/bin/python bench/attention_kernels.py [--long]
"""
import sys
import statistics
import time

import torch

HEADS, TIME, WIDTH = 4, 64, 128
HEAD_DIM = WIDTH // HEADS


def fused(qkv, batch):
    q, k, v = qkv.view(batch, TIME, 3, HEADS, HEAD_DIM).permute(2, 0, 3, 1, 4)
    y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    return y.transpose(1, 2).reshape(batch, TIME, WIDTH)


def composite(qkv, batch):
    q, k, v = (t.view(batch, TIME, HEADS, HEAD_DIM).transpose(1, 2).reshape(batch * HEADS, TIME,
                                                                             HEAD_DIM)
               for t in qkv.chunk(3, -1))
    mask = torch.zeros(TIME, TIME).masked_fill(torch.ones(TIME, TIME, dtype=torch.bool).triu(1),
                                               float("-inf")).expand(batch * HEADS, TIME, TIME)
    probs = torch.baddbmm(mask, q, k.transpose(1, 2), alpha=HEAD_DIM ** -0.5).softmax(-1)
    return probs.bmm(v).view(batch, HEADS, TIME, HEAD_DIM).transpose(1, 2).reshape(
        batch, TIME, WIDTH)


def time_ms(kernel, batch, bf16, iterations):
    qkv = torch.randn(batch, TIME, 3 * WIDTH, requires_grad=True)
    grad = torch.randn(batch, TIME, WIDTH)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        for _ in range(10):
            kernel(qkv, batch).backward(grad)
        start = time.perf_counter()
        for _ in range(iterations):
            kernel(qkv, batch).backward(grad)
    return (time.perf_counter() - start) / iterations * 1e3


def main():
    global TIME
    torch.set_num_threads(2)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    shapes = [(2, t) for t in (128, 256, 512, 1024)] if "--long" in sys.argv else [(8, 64), (2, 64)]
    for bf16 in (False, True):
        for batch, TIME in shapes:
            iterations = max(5, 200 * 64 * 64 * 8 // (TIME * TIME * batch))
            times = {"fused": [], "composite": []}
            for rep in range(7 if TIME <= 256 else 3):
                for name in (("fused", "composite") if rep % 2 == 0 else ("composite", "fused")):
                    times[name].append(time_ms(fused if name == "fused" else composite, batch,
                                               bf16, iterations))
            f, c = (statistics.median(times[n]) for n in ("fused", "composite"))
            print(f"{'bf16' if bf16 else 'fp32'} micro-batch {batch}, T {TIME}: fused {f:.3f} ms, "
                  f"composite {c:.3f} ms, composite / fused {c / f:.2f}", flush=True)


if __name__ == "__main__":
    main()
