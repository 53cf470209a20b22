#!/usr/bin/python3
"""GFLOP/s of the matrix products a GPT micro-batch really runs, against a large square product.

A training step of the default GPT (width C = 128, context T = 64, 4 heads, vocabulary 256) at
micro-batch B multiplies (B*T, K) x (K, N) matrices with K, N in {C, 3C, 4C, 256}, their
transposes in backward, and (B*heads) batched (T, C/heads) x (C/heads, T) products in attention.
This times each in fp32 and bf16 with the thread settings given by the environment and prints the
rate next to a 2048^3 product: how much of the GEMM peak such small products can reach at all.

    OPENBLAS_CORETYPE=SkylakeX OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=1 \\
        bench/gemm_shapes.py --micro-batch 8 --threads 2
"""
import argparse
import time

import torch


def rate(a, b, seconds=0.3, batched=False):
    """GFLOP/s of a @ b (torch.bmm when batched), repeated for about `seconds`."""
    product = torch.bmm if batched else torch.mm
    product(a, b)
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        product(a, b)
        count += 1
    elapsed = time.perf_counter() - start
    flops = 2 * a.shape[-2] * a.shape[-1] * b.shape[-1] * (a.shape[0] if batched else 1)
    return flops * count / elapsed / 1e9


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--threads", type=int, default=0)
    args = parser.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    width, context, heads, vocab = 128, 64, 4, 256
    rows = args.micro_batch * context
    shapes = [("qkv fwd", rows, width, 3 * width), ("attn proj fwd", rows, width, width),
              ("fc fwd", rows, width, 4 * width), ("mlp proj fwd", rows, 4 * width, width),
              ("head fwd", rows, width, vocab), ("fc weight grad", 4 * width, rows, width),
              ("fc input grad", rows, 4 * width, width)]
    for dtype in (torch.float32, torch.bfloat16):
        print(f"{str(dtype):15s} 2048^3: {rate(torch.randn(2048, 2048, dtype=dtype), torch.randn(2048, 2048, dtype=dtype)):7.1f} GFLOP/s")
        for name, m, k, n in shapes:
            a, b = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
            print(f"{str(dtype):15s} {name:15s} ({m}x{k})({k}x{n}): {rate(a, b):7.1f} GFLOP/s")
        q = torch.randn(args.micro_batch * heads, context, width // heads, dtype=dtype)
        k = torch.randn(args.micro_batch * heads, width // heads, context, dtype=dtype)
        print(f"{str(dtype):15s} {'scores bmm':15s} {tuple(q.shape)}x{tuple(k.shape)}: "
              f"{rate(q, k, batched=True):7.1f} GFLOP/s")


if __name__ == "__main__":
    main()
