#!/usr/bin/env python3
"""Tiny random Llama-family models in Hugging Face's layout, and golden values from transformers
for bigbatch's models::HfLlama tests.

Writes tests/hf/tiny-llama/ (LlamaForCausalLM: grouped-query attention 4/2, rope_theta 500000
with llama3 RoPE scaling, untied head), tests/hf/tiny-qwen2/ (Qwen2ForCausalLM: q/k/v biases,
tied embeddings), tests/hf/tiny-qwen3/ (Qwen3ForCausalLM: RMSNorm on each head's queries and
keys, head_dim 16 with 4 heads of a width of 32, tied embeddings, and a sliding window of 8 keys
on its second layer only), tests/hf/tiny-mistral/ (MistralForCausalLM: a sliding window of 8
keys on every layer) and tests/hf/tiny-gemma3/ (Gemma3ForCausalLM of model_type gemma3_text:
norms of 1 + weight around attention and MLP, query and key norms, scaled embeddings, GELU-tanh
gating, a query_pre_attn_scalar other than head_dim, a sliding window of 8 with its own RoPE
theta on the first layer, linear RoPE scaling on the second, final logit soft-capping) and
tests/hf/tiny-gemma2/ (Gemma2ForCausalLM: Gemma 3's layer without the query and key norms, one
RoPE, the attention scores soft-capped at 0.05, a sliding window of 8 on every second layer). Each
comes with <name>-golden.json: two rows of 40 token ids (past the windows), transformers' logits
(eager attention, float32, eval mode) and its loss with labels=ids. Run with the wheel's Python
after installing transformers into it:

    ~/.cache/bigbatch/torch-2.15.0/bin/pip install transformers
    ~/.cache/bigbatch/torch-2.15.0/bin/python tests/hf/make_tiny_llama.py
"""
import json
import os
import shutil

import torch
import transformers

import tiny_tokenizers

HERE = os.path.dirname(os.path.abspath(__file__))
SIZES = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)


def make(name, model_class, config, tokenizer):
    torch.manual_seed(30)
    model = model_class(config).eval()
    with torch.no_grad():  # norms and biases away from their 1 and 0 initialisation
        for key, p in model.named_parameters():
            if key.endswith("bias") or "norm" in key:
                p.add_(torch.randn_like(p) * 0.1)
    directory = os.path.join(HERE, name)
    shutil.rmtree(directory, ignore_errors=True)  # no file of an earlier tokenizer left behind
    model.save_pretrained(directory)
    tiny_tokenizers.copy_tokenizer(tokenizer, directory)
    ids = torch.randint(0, config.vocab_size, (2, 40))  # past original_max_position_embeddings
    loaded = model_class.from_pretrained(directory, attn_implementation="eager").eval()
    with torch.no_grad():
        out = loaded(input_ids=ids, labels=ids)
    golden = {"transformers": transformers.__version__, "torch": torch.__version__,
              "input_ids": ids.tolist(), "logits_shape": list(out.logits.shape),
              "logits_eager": tiny_tokenizers.rounded(out.logits), "loss_eager": out.loss.item()}
    with open(os.path.join(HERE, f"{name}-golden.json"), "w") as f:
        json.dump(golden, f)
    print(f"wrote {directory} and {name}-golden.json; loss {golden['loss_eager']:.6f}")


def main():
    make("tiny-llama", transformers.LlamaForCausalLM, transformers.LlamaConfig(
        **SIZES, vocab_size=tiny_tokenizers.vocab_size("llama3-bpe"), tie_word_embeddings=False,
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                         "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 16}), "llama3-bpe")
    make("tiny-qwen2", transformers.Qwen2ForCausalLM, transformers.Qwen2Config(
        **SIZES, vocab_size=tiny_tokenizers.vocab_size("qwen2-bpe"), tie_word_embeddings=True),
        "qwen2-bpe")
    make("tiny-qwen3", transformers.Qwen3ForCausalLM, transformers.Qwen3Config(
        **SIZES, head_dim=16, vocab_size=tiny_tokenizers.vocab_size("qwen2-bpe"),
        tie_word_embeddings=True, use_sliding_window=True, sliding_window=8, max_window_layers=1),
        "qwen2-bpe")
    make("tiny-mistral", transformers.MistralForCausalLM, transformers.MistralConfig(
        **SIZES, head_dim=8, vocab_size=tiny_tokenizers.vocab_size("llama2-bpe-fallback"),
        sliding_window=8), "llama2-bpe-fallback")
    make("tiny-gemma3", transformers.Gemma3ForCausalLM, transformers.Gemma3TextConfig(
        **SIZES, head_dim=16, query_pre_attn_scalar=24,
        vocab_size=tiny_tokenizers.vocab_size("gemma-bpe"), sliding_window=8,
        layer_types=["sliding_attention", "full_attention"], final_logit_softcapping=3.0,
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                         "full_attention": {"rope_type": "linear", "factor": 8.0,
                                            "rope_theta": 1000000.0}}), "gemma-bpe")
    make("tiny-gemma2", transformers.Gemma2ForCausalLM, transformers.Gemma2Config(
        **SIZES, head_dim=16, query_pre_attn_scalar=24, sliding_window=8,
        vocab_size=tiny_tokenizers.vocab_size("gemma-bpe"), attn_logit_softcapping=0.05,
        final_logit_softcapping=3.0), "gemma-bpe")


if __name__ == "__main__":
    main()
