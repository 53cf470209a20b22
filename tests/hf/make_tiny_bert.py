#!/usr/bin/env python3
"""A tiny random BERT classifier (BertForSequenceClassification) in Hugging Face's layout, and
golden values from transformers for bigbatch's models::HfBert tests.

Writes tests/hf/tiny-bert/ (3 labels) and tests/hf/tiny-bert-golden.json: two rows of token ids,
the second right-padded (attention_mask 0), token types, and transformers' logits (eager
attention, float32, eval mode), last hidden state and loss for labels [2, 0]. Also tests/hf/tiny-bert-encoder/: the
same weights saved as a BertModel (no "bert." prefix, no classifier), as sentence-transformers
models such as all-MiniLM-L6-v2 are. Run with the wheel's Python after installing transformers:

    ~/.cache/bigbatch/torch-2.15.0/bin/pip install transformers
    ~/.cache/bigbatch/torch-2.15.0/bin/python tests/hf/make_tiny_bert.py
"""
import json
import os

import torch
import transformers

import tiny_tokenizers

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    torch.manual_seed(40)
    config = transformers.BertConfig(vocab_size=tiny_tokenizers.vocab_size("bert-wordpiece"), hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=4, intermediate_size=64,
                                     max_position_embeddings=32, type_vocab_size=2, num_labels=3)
    model = transformers.BertForSequenceClassification(config).eval()
    with torch.no_grad():  # norms and biases away from their 1 and 0 initialisation
        for key, p in model.named_parameters():
            if key.endswith("bias") or "LayerNorm" in key:
                p.add_(torch.randn_like(p) * 0.1)
    directory = os.path.join(HERE, "tiny-bert")
    model.save_pretrained(directory)
    model.bert.save_pretrained(os.path.join(HERE, "tiny-bert-encoder"))
    tiny_tokenizers.copy_tokenizer("bert-wordpiece", directory)
    tiny_tokenizers.copy_tokenizer("bert-wordpiece", os.path.join(HERE, "tiny-bert-encoder"))
    ids = torch.randint(1, config.vocab_size, (2, 10))
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    ids[1, 6:] = 0  # the pad token
    types = torch.zeros_like(ids)
    types[:, 4:] = 1
    types[1, 6:] = 0
    labels = torch.tensor([2, 0])
    loaded = transformers.BertForSequenceClassification.from_pretrained(
        directory, attn_implementation="eager").eval()
    with torch.no_grad():
        out = loaded(input_ids=ids, attention_mask=mask, token_type_ids=types, labels=labels,
                     output_hidden_states=True)
    golden = {"transformers": transformers.__version__, "torch": torch.__version__,
              "input_ids": ids.tolist(), "attention_mask": mask.tolist(),
              "token_type_ids": types.tolist(), "labels": labels.tolist(),
              "logits": out.logits.flatten().tolist(), "loss": out.loss.item(),
              "last_hidden_state": out.hidden_states[-1].flatten().tolist(),
              "hidden_shape": list(out.hidden_states[-1].shape)}
    with open(os.path.join(HERE, "tiny-bert-golden.json"), "w") as f:
        json.dump(golden, f)
    print(f"wrote {directory}, tiny-bert-encoder and tiny-bert-golden.json; loss "
          f"{golden['loss']:.6f}, logits {out.logits.tolist()}")


if __name__ == "__main__":
    main()
