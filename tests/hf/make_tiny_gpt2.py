#!/usr/bin/env python3
"""A tiny random GPT-2 (GPT2LMHeadModel) in Hugging Face's layout, and golden values from
transformers for bigbatch's models::HfGpt2 tests.

Writes tests/hf/tiny-gpt2/ (config.json, model.safetensors, generation_config.json, as
save_pretrained writes them; about 120 KB) and tests/hf/tiny-gpt2-golden.json: two rows of
token ids, the logits transformers computes for them (eager attention, float32, eval mode) and
its loss with labels=ids. Run with the wheel's Python after installing transformers into it:

    ~/.cache/bigbatch/torch-2.15.0/bin/pip install transformers
    ~/.cache/bigbatch/torch-2.15.0/bin/python tests/hf/make_tiny_gpt2.py
"""
import json
import os

import torch
import transformers

import tiny_tokenizers

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = HERE


def main():
    torch.manual_seed(20)
    config = transformers.GPT2Config(vocab_size=tiny_tokenizers.vocab_size("gpt2-bpe"), n_positions=32, n_embd=32, n_layer=2,
                                     n_head=4, bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2LMHeadModel(config).eval()
    with torch.no_grad():  # biases and norms away from their 0 and 1 initialisation
        for name, p in model.named_parameters():
            if name.endswith("bias") or "ln_" in name:
                p.add_(torch.randn_like(p) * 0.1)
    directory = os.path.join(OUT, "tiny-gpt2")
    model.save_pretrained(directory)
    tiny_tokenizers.copy_tokenizer("gpt2-bpe", directory)
    ids = torch.randint(0, config.vocab_size, (2, 12))
    golden = {"transformers": transformers.__version__, "torch": torch.__version__,
              "input_ids": ids.tolist()}
    for implementation in ("eager", "sdpa"):
        loaded = transformers.GPT2LMHeadModel.from_pretrained(
            directory, attn_implementation=implementation).eval()
        with torch.no_grad():
            out = loaded(input_ids=ids, labels=ids)
        golden[f"logits_{implementation}"] = tiny_tokenizers.rounded(out.logits)
        golden[f"loss_{implementation}"] = out.loss.item()
    golden["logits_shape"] = list(out.logits.shape)
    with open(os.path.join(OUT, "tiny-gpt2-golden.json"), "w") as f:
        json.dump(golden, f)
    print(f"wrote {directory} and tiny-gpt2-golden.json; loss {golden['loss_eager']:.6f}, "
          f"eager vs sdpa max |diff| "
          f"{max(abs(a - b) for a, b in zip(golden['logits_eager'], golden['logits_sdpa'])):.2e}")


if __name__ == "__main__":
    main()
