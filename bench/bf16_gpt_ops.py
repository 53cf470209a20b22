#!/usr/bin/python3
"""One thread's times of the default GPT's bf16 operations at micro-batch 8 (512 rows, 32
attention matrices of 64 x 32), as the fused block calls them.

Products on oneDNN (what torch.mm / bmm / baddbmm run in bf16) against MKL's
cblas_gemm_bf16bf16f32 (exported by the wheel's libtorch_cpu.so, fp32 results): what a product
costs besides its arithmetic (a single 64 x 32 x 64 product; a batched one's growth with the
batch). Then the GELU forward and backward on the (512, 512) feed-forward activations, which ATen
runs on oneDNN's eltwise kernels in bf16. docs/BENCHMARKS.md, "bf16 on the default GPT: where
the time goes". Usage, with the peers' Python (torch 2.x):

    bench/bf16_gpt_ops.py
"""
import ctypes
import os
import time

import torch

torch.set_num_threads(1)
ROW_MAJOR, NO_TRANS = 101, 111


def micros(fn, reps=300):
    """The mean time of `fn` in microseconds, after a warm-up."""
    for _ in range(30):
        fn()
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - start) / reps * 1e6


def mkl_bf16_gemm():
    """MKL's cblas_gemm_bf16bf16f32 from libtorch_cpu.so, or None where it is not exported."""
    library = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))
    gemm = getattr(library, "cblas_gemm_bf16bf16f32", None)
    if gemm is not None:
        gemm.argtypes = [ctypes.c_int] * 6 + [ctypes.c_float, ctypes.c_void_p, ctypes.c_int,
                                              ctypes.c_void_p, ctypes.c_int, ctypes.c_float,
                                              ctypes.c_void_p, ctypes.c_int]
    return gemm


def rate(flops, us):
    return f"{flops / us / 1e3:6.1f} GFLOP/s"


def main():
    bf16 = torch.bfloat16
    print(f"torch {torch.__version__}, 1 thread")
    gemm = mkl_bf16_gemm()
    for m, k, n in ((64, 32, 64), (512, 128, 384), (512, 128, 512), (512, 512, 128)):
        a, b = torch.randn(m, k).to(bf16), torch.randn(k, n).to(bf16)
        c = torch.empty(m, n)
        onednn = micros(lambda: torch.mm(a, b))
        line = f"mm {m}x{k}x{n}: oneDNN {onednn:7.1f} us {rate(2 * m * k * n, onednn)}"
        if gemm is not None:
            mkl = micros(lambda: gemm(ROW_MAJOR, NO_TRANS, NO_TRANS, m, n, k, 1.0, a.data_ptr(),
                                      k, b.data_ptr(), n, 0.0, c.data_ptr(), n))
            same = torch.equal(c, a.float() @ b.float())
            line += f"; MKL {mkl:7.1f} us {rate(2 * m * k * n, mkl)} (fp32 result exact: {same})"
        print(line)
    for batch in (8, 32, 128):
        q, k = torch.randn(batch, 64, 32).to(bf16), torch.randn(batch, 64, 32).to(bf16)
        us = micros(lambda: torch.bmm(q, k.transpose(1, 2)))
        print(f"bmm {batch} x (64x32x64), k transposed: {us:7.1f} us "
              f"{rate(batch * 2 * 64 * 32 * 64, us)}")
    q, k = torch.randn(32, 64, 32).to(bf16), torch.randn(32, 64, 32).to(bf16)
    k_t = k.transpose(1, 2).contiguous()  # (32, 32, 64)
    probs, mask = torch.randn(32, 64, 64).to(bf16), torch.randn(64, 64).to(bf16)
    flops = 32 * 2 * 64 * 32 * 64
    for name, fn in (
            ("q k^T, k^T contiguous", lambda: torch.bmm(q, k_t)),
            ("baddbmm(mask, q, k^T), the block's scores", lambda: torch.baddbmm(
                mask, q, k.transpose(1, 2), beta=1, alpha=0.17)),
            ("probs v", lambda: torch.bmm(probs, k)),
            ("probs^T d, backward's", lambda: torch.bmm(probs.transpose(1, 2), k))):
        us = micros(fn)
        print(f"{name}: {us:7.1f} us {rate(flops, us)}")
    pre, grad = torch.randn(512, 512).to(bf16), torch.randn(512, 512).to(bf16)
    for name, fn in (("gelu", lambda: torch.nn.functional.gelu(pre)),
                     ("gelu_backward", lambda: torch.ops.aten.gelu_backward(grad, pre))):
        us = micros(fn)
        print(f"{name} (512, 512) bf16: {us:7.1f} us, {us * 1e3 / pre.numel():.2f} ns a value")


if __name__ == "__main__":
    main()
