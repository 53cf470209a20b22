#!/usr/bin/python3
"""Loads a bigbatch Hugging Face export with transformers (and peft) and compares its logits
with bigbatch's (tests/models/hf_export_test.cpp).

    check_hf_export.py EXPECTED.json

EXPECTED.json: {"mode": "merged" | "peft", "directory": the export, "base": the source model
directory (peft), "task": "causal_lm" | "classification", "num_labels", "input_ids" (B, T),
"attention_mask" (B, T), "logits" (flat), "logits_shape", "tolerance"}.

merged: AutoModelFor...from_pretrained(directory); peft: PeftModel.from_pretrained(
AutoModelFor...from_pretrained(base), directory). Eager attention, eval mode. The logits of real
tokens (a causal LM's padded positions are left out) are compared: prints max_abs_diff and exits 0
when it is at most the tolerance, 1 otherwise, 77 (printing what is missing) when a package is.
"""
import json
import sys


def main():
    with open(sys.argv[1]) as file:
        expected = json.load(file)
    try:
        import torch
        import transformers
    except ImportError as error:
        print(f"missing Python package: {error.name}")
        return 77
    peft_mode = expected["mode"] == "peft"
    if peft_mode:
        try:
            import peft
        except ImportError as error:
            print(f"missing Python package: {error.name}")
            return 77
    classification = expected["task"] == "classification"
    auto = (transformers.AutoModelForSequenceClassification if classification else
            transformers.AutoModelForCausalLM)
    options = {"attn_implementation": "eager"}
    if peft_mode:
        if classification:
            options["num_labels"] = expected["num_labels"]
        model = auto.from_pretrained(expected["base"], **options)
        model = peft.PeftModel.from_pretrained(model, expected["directory"])
        adapters = sum(1 for name, _ in model.named_modules() if name.endswith(".lora_A"))
        print(f"peft {peft.__version__}: {adapters} adapted modules")
    else:
        model, info = auto.from_pretrained(expected["directory"], output_loading_info=True,
                                           **options)
        problems = {key: value for key, value in info.items() if value}
        if problems:
            print(f"transformers {transformers.__version__} loading: {problems}")
            return 1
        print(f"transformers {transformers.__version__}: {type(model).__name__}, "
              f"{model.config.num_labels if classification else model.config.vocab_size} outputs")
    model.eval()
    input_ids = torch.tensor(expected["input_ids"], dtype=torch.long)  # (B, T)
    mask = torch.tensor(expected["attention_mask"], dtype=torch.long)  # (B, T)
    with torch.no_grad():
        logits = model(input_ids=input_ids, attention_mask=mask).logits.float()
    reference = torch.tensor(expected["logits"], dtype=torch.float32).reshape(
        expected["logits_shape"])
    if tuple(logits.shape) != tuple(reference.shape):
        print(f"logits {tuple(logits.shape)}, bigbatch's {tuple(reference.shape)}")
        return 1
    if not classification:
        real = mask.bool()  # (B, T): the positions of real tokens
        logits, reference = logits[real], reference[real]
    difference = (logits - reference).abs().max().item()
    tolerance = expected["tolerance"]
    print(f"{expected['mode']}: max_abs_diff {difference:.3e} (tolerance {tolerance:.0e}, "
          f"logits up to {reference.abs().max().item():.2f})")
    return 0 if difference <= tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
