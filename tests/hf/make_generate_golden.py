#!/usr/bin/env python3
"""Golden greedy continuations from transformers for bigbatch's models::generate_ids tests.

Loads the committed tiny models (tests/hf/tiny-gpt2, tiny-llama, tiny-qwen2, tiny-qwen3,
tiny-mistral, tiny-gemma3 and tiny-gemma2; the 64 positions cross the sliding windows of 8 of
the last four; made by make_tiny_gpt2.py and make_tiny_llama.py), and for each continues a fixed
prompt of token ids greedily with model.generate(do_sample=False, use_cache=True) in float32,
eval mode, until the model's positions are full (no EOS: generation stops on length only). Writes
tests/hf/generate-golden.json: per model the prompt, the new ids and the smallest gap between the
largest and second-largest logit over the steps (how far each choice was from a tie). Run with
the wheel's Python after installing transformers into it:

    ~/.cache/bigbatch/torch-2.15.0/bin/python tests/hf/make_generate_golden.py
"""
import json
import os

import torch
import transformers

HERE = os.path.dirname(os.path.abspath(__file__))
PROMPT_LENGTH = 6


def continuation(name):
    directory = os.path.join(HERE, name)
    model = transformers.AutoModelForCausalLM.from_pretrained(directory,
                                                              dtype=torch.float32).eval()
    config = model.config
    positions = getattr(config, "n_positions", None) or config.max_position_embeddings
    torch.manual_seed(40)
    prompt = torch.randint(0, config.vocab_size, (1, PROMPT_LENGTH))
    with torch.no_grad():
        out = model.generate(prompt, do_sample=False, use_cache=True,
                             max_new_tokens=positions - PROMPT_LENGTH, min_new_tokens=0,
                             eos_token_id=None, pad_token_id=0, output_scores=True,
                             return_dict_in_generate=True)
    scores = torch.stack(out.scores)  # (new, 1, vocab)
    top2 = scores.topk(2, dim=-1).values
    gap = (top2[..., 0] - top2[..., 1]).min().item()
    new = out.sequences[0, PROMPT_LENGTH:].tolist()
    print(f"{name}: {len(new)} new ids, smallest top-2 gap {gap:.2e}")
    return {"prompt": prompt[0].tolist(), "new_ids": new, "smallest_top2_gap": gap}


def main():
    golden = {"transformers": transformers.__version__, "torch": torch.__version__}
    for name in ("tiny-gpt2", "tiny-llama", "tiny-qwen2", "tiny-qwen3", "tiny-mistral",
                 "tiny-gemma3", "tiny-gemma2"):
        golden[name] = continuation(name)
    with open(os.path.join(HERE, "generate-golden.json"), "w") as f:
        json.dump(golden, f)


if __name__ == "__main__":
    main()
