#!/usr/bin/env python3
"""A tiny random ModernBERT classifier (ModernBertForSequenceClassification) in Hugging Face's
layout, and golden values from transformers for bigbatch's models::HfModernBert tests.

Writes tests/hf/tiny-modernbert/ (3 labels, the modernbert-bpe tokenizer, 3 layers: global
attention, then two local ones over keys at most 2 away, local_attention = 4) and
tests/hf/tiny-modernbert-golden.json: two rows of 12 token ids, the second right-padded with
[PAD] after 7 (attention_mask 0), and transformers' last hidden state (after final_norm), logits
and loss for labels [2, 0] (eager attention, float32, eval mode), with classifier_pooling "cls"
(the fixture's) and "mean". Also tests/hf/tiny-modernbert-mlm/: the same encoder and prediction
head in a ModernBertForMaskedLM (decoder tied to the embeddings, its bias saved), as
answerdotai/ModernBERT-base is, and tests/hf/tiny-modernbert-encoder/: the encoder alone, a
ModernBertModel (no "model." prefix, no head), as sentence-transformers' ModernBERT models are.
Run with the wheel's Python after installing transformers:

    ~/.cache/bigbatch/torch-2.15.0/bin/pip install transformers
    ~/.cache/bigbatch/torch-2.15.0/bin/python tests/hf/make_tiny_modernbert.py
"""
import json
import os

import torch
import transformers

import tiny_tokenizers

HERE = os.path.dirname(os.path.abspath(__file__))
TOKENIZER = "modernbert-bpe"


def token_id(token):
    with open(os.path.join(HERE, "tokenizers", TOKENIZER, "tokenizer.json")) as f:
        return json.load(f)["model"]["vocab"][token]


def outputs(directory, ids, mask, labels, pooling):
    """transformers' eager outputs of the classifier in `directory` with `pooling`."""
    model = transformers.ModernBertForSequenceClassification.from_pretrained(
        directory, attn_implementation="eager", classifier_pooling=pooling).eval()
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, labels=labels)
        hidden = model.model(input_ids=ids, attention_mask=mask).last_hidden_state
    return {"logits": tiny_tokenizers.rounded(out.logits), "loss": out.loss.item(),
            "last_hidden_state": tiny_tokenizers.rounded(hidden),
            "hidden_shape": list(hidden.shape)}


def main():
    torch.manual_seed(44)
    pad, cls, sep = token_id("[PAD]"), token_id("[CLS]"), token_id("[SEP]")
    config = transformers.ModernBertConfig(
        vocab_size=tiny_tokenizers.vocab_size(TOKENIZER), hidden_size=32, intermediate_size=48,
        num_hidden_layers=3, num_attention_heads=4, max_position_embeddings=64,
        local_attention=4, global_attn_every_n_layers=3, pad_token_id=pad, cls_token_id=cls,
        bos_token_id=cls, sep_token_id=sep, eos_token_id=sep, num_labels=3,
        classifier_pooling="cls")
    model = transformers.ModernBertForSequenceClassification(config).eval()
    with torch.no_grad():
        for key, p in model.named_parameters():
            if "norm" in key or key == "classifier.bias":  # norms away from 1, the bias from 0
                p.add_(torch.randn_like(p) * 0.1)
            elif p.dim() == 2 and "embeddings" not in key:
                p.mul_(3)  # ModernBERT's initialisation (std 0.02) leaves every input's logits alike
    directory = os.path.join(HERE, "tiny-modernbert")
    model.save_pretrained(directory)
    tiny_tokenizers.copy_tokenizer(TOKENIZER, directory)

    mlm = transformers.ModernBertForMaskedLM(config)
    mlm.model.load_state_dict(model.model.state_dict())
    mlm.head.load_state_dict(model.head.state_dict())
    mlm_directory = os.path.join(HERE, "tiny-modernbert-mlm")
    mlm.save_pretrained(mlm_directory)
    tiny_tokenizers.copy_tokenizer(TOKENIZER, mlm_directory)

    encoder_directory = os.path.join(HERE, "tiny-modernbert-encoder")
    model.model.save_pretrained(encoder_directory)
    tiny_tokenizers.copy_tokenizer(TOKENIZER, encoder_directory)

    ids = torch.randint(2, config.vocab_size - 5, (2, 12))  # the pieces, no special token
    ids[:, 0] = cls
    ids[0, 11] = sep
    ids[1, 6] = sep
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    ids[1, 7:] = pad
    labels = torch.tensor([2, 0])
    golden = {"transformers": transformers.__version__, "torch": torch.__version__,
              "input_ids": ids.tolist(), "attention_mask": mask.tolist(),
              "labels": labels.tolist(),
              "cls": outputs(directory, ids, mask, labels, "cls"),
              "mean": outputs(directory, ids, mask, labels, "mean")}
    with open(os.path.join(HERE, "tiny-modernbert-golden.json"), "w") as f:
        json.dump(golden, f)
    print(f"wrote {directory}, tiny-modernbert-mlm, tiny-modernbert-encoder and "
          f"tiny-modernbert-golden.json; loss "
          f"{golden['cls']['loss']:.6f} (mean pooling {golden['mean']['loss']:.6f}), logits "
          f"{golden['cls']['logits']}")


if __name__ == "__main__":
    main()
