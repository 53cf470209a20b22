#!/usr/bin/python3
"""Where a GPT micro-batch's time goes: torch.profiler over the peer's forward + backward.

python/bigbatch_torch.py's default GPT (4 layers, width 128, context 64) at one OpenMP thread,
forward, summed cross-entropy and backward of random tokens: prints the time per micro-batch
(10 passes, unprofiled) and the operators by self CPU time over 5 profiled passes. Both sides run
these kernels; the Python interpreter's share is what bigbatch does not pay. Usage:

    OPENBLAS_CORETYPE=SkylakeX OPENBLAS_NUM_THREADS=1 bench/profile_gpt.py 2        # micro-batch 2
    OPENBLAS_CORETYPE=SkylakeX OPENBLAS_NUM_THREADS=1 bench/profile_gpt.py 8 bf16
"""
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import bigbatch_torch  # noqa: E402  (the models, after the path is set)


def main():
    micro_batch = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    bf16 = len(sys.argv) > 2 and sys.argv[2] == "bf16"
    torch.set_num_threads(1)
    model = bigbatch_torch.Gpt(context=64)
    inputs, targets = torch.randint(0, 256, (micro_batch, 64)), torch.randint(0, 256, (micro_batch, 64))

    def step():
        with torch.autocast("cpu", torch.bfloat16, enabled=bf16):
            logits = model(inputs)
            loss = torch.nn.functional.cross_entropy(logits.view(-1, 256).float(),
                                                     targets.view(-1), reduction="sum")
        loss.backward()

    for _ in range(5):
        step()
    start = time.perf_counter()
    for _ in range(10):
        step()
    print(f"per micro-batch: {(time.perf_counter() - start) / 10 * 1e3:.1f} ms")
    with torch.profiler.profile() as profile:
        for _ in range(5):
            step()
    print(profile.key_averages().table(sort_by="self_cpu_time_total", row_limit=20))


if __name__ == "__main__":
    main()
