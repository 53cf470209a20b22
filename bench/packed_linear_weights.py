#!/usr/bin/python3
"""oneDNN's bf16 linear with the weight reordered once beforehand, against the plain weight.

Each forward product of a bf16 Linear (`mkldnn::_linear_pointwise`, which bigbatch's
`nn::gemm_bias` calls) reorders its weight into oneDNN's blocked layout first. Within an
accumulation window the weights do not change, so the reorder could be made once a window
(`mkldnn::_reorder_linear_weight`). This times both at MiniLM's, the default GPT's and the 30M
Llama's forward shapes, checks that the results are bitwise the same, and does the same for
row counts the reorder was not told (docs/BENCHMARKS.md). Run with the wheel's Python:

    ~/.cache/bigbatch/torch-2.15.0/bin/python bench/packed_linear_weights.py
"""
import time

import torch

torch.set_num_threads(2)
# (rows, inputs, outputs): MiniLM's qkv, projection, fc and output at about 264 packed rows; the
# default GPT's qkv and fc at 512 rows; the 30M Llama's gate at 1024 rows.
SHAPES = [(264, 384, 1152), (264, 384, 384), (264, 384, 1536), (264, 1536, 384),
          (512, 128, 384), (512, 128, 512), (1024, 576, 1536)]
OTHER_ROWS = [64, 200, 312, 512]


def milliseconds(call, reps=200):
    for _ in range(10):
        call()
    start = time.perf_counter()
    for _ in range(reps):
        call()
    return (time.perf_counter() - start) / reps * 1e3


def linear(x, weight, bias):
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


def main():
    torch.manual_seed(0)
    print("rows inputs outputs  plain ms  reordered ms  ratio  bitwise")
    for rows, inputs, outputs in SHAPES:
        x = torch.randn(rows, inputs).bfloat16()
        weight = torch.randn(outputs, inputs).bfloat16()
        bias = torch.randn(outputs).bfloat16()
        reordered = torch.ops.mkldnn._reorder_linear_weight(weight, rows)
        same = torch.equal(linear(x, weight, bias), linear(x, reordered, bias))
        plain = milliseconds(lambda: linear(x, weight, bias))
        packed = milliseconds(lambda: linear(x, reordered, bias))
        print(f"{rows:4d} {inputs:6d} {outputs:7d}  {plain:8.3f}  {packed:12.3f}  "
              f"{plain / packed:5.2f}  {same}")
    # One reorder for a window whose micro-batches have other row counts.
    weight = torch.randn(1152, 384).bfloat16()
    bias = torch.randn(1152).bfloat16()
    reordered = torch.ops.mkldnn._reorder_linear_weight(weight, 264)
    for rows in OTHER_ROWS:
        x = torch.randn(rows, 384).bfloat16()
        same = torch.equal(linear(x, weight, bias), linear(x, reordered, bias))
        print(f"reordered for 264 rows, run at {rows}: bitwise {same}")


if __name__ == "__main__":
    main()
