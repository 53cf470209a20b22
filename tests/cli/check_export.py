#!/usr/bin/python3
"""Checks a bigbatch export against the logits bigbatch computed (tests/cli/export_round_trip_test).

    check_export.py MODEL.safetensors EXPECTED.safetensors [TOLERANCE]

Loads MODEL with python/bigbatch_torch.py (PyTorch modules of the same names), runs it in eval
mode on EXPECTED's "inputs" and compares with EXPECTED's "logits": prints the maximum absolute
difference and exits 0 when it is at most TOLERANCE (default 1e-5), 1 otherwise.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

import torch  # noqa: E402

import bigbatch_torch  # noqa: E402


def main():
    model_path, expected_path = sys.argv[1], sys.argv[2]
    tolerance = float(sys.argv[3]) if len(sys.argv) > 3 else 1e-5
    model, spec = bigbatch_torch.load(model_path)
    expected, _ = bigbatch_torch.read_safetensors(expected_path)
    with torch.no_grad():
        logits = model(expected["inputs"])
    if logits.shape != expected["logits"].shape or logits.dtype != expected["logits"].dtype:
        print(f"{spec['kind']}: logits {tuple(logits.shape)} {logits.dtype}, bigbatch's "
              f"{tuple(expected['logits'].shape)} {expected['logits'].dtype}")
        return 1
    difference = (logits - expected["logits"]).abs().max().item()
    print(f"{spec['kind']}: max_abs_diff {difference:.3e} (tolerance {tolerance:.0e})")
    return 0 if difference <= tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
