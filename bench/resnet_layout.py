#!/usr/bin/python3
"""The ResNet's forward + backward in NCHW and with channels-last weights and inputs.

python/bigbatch_torch.py's ResNet-8 (width 16, BatchNorm) on a micro-batch of 64 Fashion-MNIST
sized images, 2 OpenMP threads (the ResNet's setting), alternating the two layouts; prints
samples/s of 10 timed passes each. Usage:

    OPENBLAS_CORETYPE=SkylakeX OPENBLAS_NUM_THREADS=1 bench/resnet_layout.py
"""
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import bigbatch_torch  # noqa: E402  (the models, after the path is set)


def main():
    torch.set_num_threads(2)
    for layout in ["NCHW", "channels-last"] * 2:
        torch.manual_seed(0)
        model = bigbatch_torch.ResNet(depth=8, width=16, in_channels=1, classes=10, norm="batch")
        images, labels = torch.randn(64, 1, 28, 28), torch.randint(0, 10, (64,))
        if layout == "channels-last":
            model = model.to(memory_format=torch.channels_last)
            images = images.contiguous(memory_format=torch.channels_last)

        def step():
            torch.nn.functional.cross_entropy(model(images), labels, reduction="sum").backward()

        for _ in range(3):
            step()
        start = time.perf_counter()
        for _ in range(10):
            step()
        print(f"{layout:14s} {640 / (time.perf_counter() - start):7.0f} samples/s")


if __name__ == "__main__":
    main()
