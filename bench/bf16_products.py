#!/usr/bin/python3
"""bf16 matrix products on oneDNN's bf16 kernels against fp32 kernels fed bf16-rounded operands.

For the GPT's Linear shapes at micro-batch 8 (512 rows) and one attention bmm: the time of
`a @ b` in bf16 (what CPU autocast runs), of the same product on fp32 kernels with the operands
and the result rounded to bf16 (what nn/bf16_matmul runs on CPUs without bf16 instructions), and
the share of results that differ (summation order). Usage:

    OPENBLAS_CORETYPE=SkylakeX OPENBLAS_NUM_THREADS=1 bench/bf16_products.py
"""
import time

import torch


def microseconds(f, n=50):
    f()
    start = time.perf_counter()
    for _ in range(n):
        f()
    return (time.perf_counter() - start) / n * 1e6


def main():
    torch.set_num_threads(1)
    for m, k, n in [(512, 128, 384), (512, 128, 512), (512, 512, 128), (512, 128, 256)]:
        a, b = torch.randn(m, k).bfloat16(), torch.randn(k, n).bfloat16()
        native = microseconds(lambda: a @ b)
        fp32 = microseconds(lambda: (a.float() @ b.float()).bfloat16())
        differ = ((a @ b) != (a.float() @ b.float()).bfloat16()).float().mean().item()
        print(f"{m}x{k}x{n}: bf16 kernels {native:7.0f} us, fp32 kernels {fp32:7.0f} us "
              f"({native / fp32:.1f}x), results differing {differ:.4%}")
    a, b = torch.randn(32, 64, 32).bfloat16(), torch.randn(32, 32, 64).bfloat16()
    native = microseconds(lambda: torch.bmm(a, b))
    fp32 = microseconds(lambda: torch.bmm(a.float(), b.float()).bfloat16())
    print(f"bmm 32x(64x32x64): bf16 kernels {native:7.0f} us, fp32 kernels {fp32:7.0f} us "
          f"({native / fp32:.1f}x)")


if __name__ == "__main__":
    main()
