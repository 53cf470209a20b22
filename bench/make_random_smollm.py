#!/usr/bin/env python3
"""A Llama-architecture model of SmolLM-135M's shape with random weights, in Hugging Face's layout,
for measuring bigbatch on a ~135M-parameter model without downloading one.

    ~/.cache/bigbatch/torch-2.15.0/bin/python bench/make_random_smollm.py OUT_DIR

SmolLM-135M's config.json (HuggingFaceTB/SmolLM-135M): 30 layers, width 576, 9 heads with 3
key/value heads, MLP 1536, vocabulary 49,152, 2,048 positions, rope_theta 10000, RMSNorm eps 1e-5,
tied embeddings. The tokenizer is the small byte-level BPE fixture of tests/hf/tokenizers/
llama3-bpe (its ids are far below the vocabulary): the weights are random, so what matters is the
shape and the number of tokens per sample."""
import os
import shutil
import sys

import torch
import transformers

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    out = sys.argv[1]
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
        num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=2048,
        rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=True, bos_token_id=0,
        eos_token_id=0)
    model = transformers.LlamaForCausalLM(config)
    model.save_pretrained(out)
    fixture = os.path.join(HERE, "..", "tests", "hf", "tokenizers", "llama3-bpe")
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if os.path.exists(os.path.join(fixture, name)):
            shutil.copyfile(os.path.join(fixture, name), os.path.join(out, name))
    print(f"wrote {out}: {sum(p.numel() for p in model.parameters()):,} parameters")


if __name__ == "__main__":
    main()
