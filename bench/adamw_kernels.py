#!/usr/bin/env python3
"""One AdamW step over the default GPT's parameters (867k in 2 groups: 20 decayed tensors and
the rest), with PyTorch's fused kernel (fused=True, the at::_fused_adamw_ that engine::FusedAdamW
calls) against the per-tensor loop (foreach=False, the update torch::optim::AdamW makes one
operation at a time). Python adds its own overhead to each of the loop's operations, so the loop's
time here is an upper bound of LibTorch's C++ loop. The numbers behind optim.kernel = "auto"
(docs/BENCHMARKS.md). Run with the wheel's Python:

    ~/.cache/bigbatch/torch-2.15.0/bin/python bench/adamw_kernels.py
"""
import statistics
import sys
import time

import torch

sys.path.insert(0, __file__.rsplit("/bench/", 1)[0] + "/python")
import bigbatch_torch  # noqa: E402


def step_ms(fused, steps=200):
    torch.manual_seed(0)
    model = bigbatch_torch.Gpt(context=64, layers=4, heads=4, embed=128)
    params = [p for p in model.parameters()]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    kind = {"fused": True} if fused else {"foreach": False}
    optimizer = torch.optim.AdamW(groups, lr=4e-3, betas=(0.9, 0.99), eps=1e-8, **kind)
    for p in params:
        p.grad = torch.randn_like(p)
    for _ in range(10):
        optimizer.step()
    start = time.perf_counter()
    for _ in range(steps):
        optimizer.step()
    return (time.perf_counter() - start) / steps * 1e3


def main():
    torch.set_num_threads(2)
    count = sum(p.numel() for p in bigbatch_torch.Gpt(context=64, layers=4, heads=4,
                                                       embed=128).parameters())
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {count:,} parameters")
    times = {True: [], False: []}
    for rep in range(7):
        for fused in ((True, False) if rep % 2 == 0 else (False, True)):
            times[fused].append(step_ms(fused))
    f, loop = statistics.median(times[True]), statistics.median(times[False])
    print(f"AdamW step: fused {f:.3f} ms, per-tensor loop {loop:.3f} ms, loop / fused "
          f"{loop / f:.2f}")


if __name__ == "__main__":
    main()
