#!/usr/bin/env python3
"""A tiny random BERT classifier (BertForSequenceClassification) and a tiny RoBERTa classifier
(RobertaForSequenceClassification) in Hugging Face's layout, and golden values from transformers
for bigbatch's models::HfBert tests.

Writes tests/hf/tiny-bert/ (3 labels) and tests/hf/tiny-bert-golden.json: two rows of token ids,
the second right-padded (attention_mask 0), token types, and transformers' logits (eager
attention, float32, eval mode), last hidden state and loss for labels [2, 0]. Also tests/hf/tiny-bert-encoder/: the
same weights saved as a BertModel (no "bert." prefix, no classifier), as sentence-transformers
models such as all-MiniLM-L6-v2 are, and tests/hf/tiny-bert-pretraining/: the same encoder in a
BertForPreTraining with its pre-training heads (cls.*), as bert-base-uncased is.

tests/hf/tiny-roberta/ (3 labels, the roberta-bpe tokenizer, pad id 1, positions counted from
pad + 1) and tests/hf/tiny-roberta-golden.json: the same kind of values, the padded row holding
the pad id. tests/hf/tiny-roberta-mlm/: the same encoder in a RobertaForMaskedLM with a pooler
beside it, the tensors roberta-base holds (roberta.*, roberta.pooler.*, lm_head.*).

tests/hf/tiny-distilbert/ (DistilBertForSequenceClassification, 3 labels, the bert-wordpiece
tokenizer) and tests/hf/tiny-distilbert-golden.json; tests/hf/tiny-distilbert-mlm/: the same
encoder in a DistilBertForMaskedLM, as distilbert-base-uncased is.

tests/hf/tiny-electra/ (ElectraForSequenceClassification, 3 labels, embeddings of 16 projected to
the width of 32, the bert-wordpiece tokenizer) and tests/hf/tiny-electra-golden.json;
tests/hf/tiny-electra-discriminator/: the same encoder in an ElectraForPreTraining, as
google/electra-base-discriminator is. Run with the wheel's Python after installing transformers:

    ~/.cache/bigbatch/torch-2.15.0/bin/pip install transformers
    ~/.cache/bigbatch/torch-2.15.0/bin/python tests/hf/make_tiny_bert.py
"""
import json
import os

import safetensors.torch
import torch
import transformers

import tiny_tokenizers

HERE = os.path.dirname(os.path.abspath(__file__))


def perturb_norms_and_biases(model):
    """Norms and biases away from their 1 and 0 initialisation."""
    with torch.no_grad():
        for key, p in model.named_parameters():
            if key.endswith("bias") or "LayerNorm" in key:
                p.add_(torch.randn_like(p) * 0.1)


def golden_of(model_class, directory, ids, mask, types, labels):
    """transformers' eager outputs of the saved classifier in `directory` (types None: a model
    without token types)."""
    loaded = model_class.from_pretrained(directory, attn_implementation="eager").eval()
    inputs = {"input_ids": ids, "attention_mask": mask}
    if types is not None:
        inputs["token_type_ids"] = types
    with torch.no_grad():
        out = loaded(**inputs, labels=labels, output_hidden_states=True)
    golden = {"transformers": transformers.__version__, "torch": torch.__version__}
    golden.update({key: value.tolist() for key, value in inputs.items()})
    golden.update({"labels": labels.tolist(), "logits": out.logits.flatten().tolist(),
                   "loss": out.loss.item(),
                   "last_hidden_state": out.hidden_states[-1].flatten().tolist(),
                   "hidden_shape": list(out.hidden_states[-1].shape)})
    return golden


def save_with_pretrained_twin(model, name, twin_class, twin_name, encoder, tokenizer):
    """Saves the classifier `model` as tests/hf/`name`, and its encoder (the attribute `encoder`)
    in a fresh `twin_class` (the pre-training model the Hub's checkpoint is) as `twin_name`, each
    with the tokenizer fixture `tokenizer`; returns the classifier's directory."""
    directory = os.path.join(HERE, name)
    model.save_pretrained(directory)
    tiny_tokenizers.copy_tokenizer(tokenizer, directory)
    twin = twin_class(model.config)
    getattr(twin, encoder).load_state_dict(getattr(model, encoder).state_dict())
    twin_directory = os.path.join(HERE, twin_name)
    twin.save_pretrained(twin_directory)
    tiny_tokenizers.copy_tokenizer(tokenizer, twin_directory)
    return directory


def bert_pretraining(config, encoder):
    """`encoder`'s weights in a BertForPreTraining (pre-training heads drawn at random)."""
    model = transformers.BertForPreTraining(config)
    model.bert.load_state_dict(encoder.state_dict())
    directory = os.path.join(HERE, "tiny-bert-pretraining")
    model.save_pretrained(directory)
    tiny_tokenizers.copy_tokenizer("bert-wordpiece", directory)


def roberta():
    torch.manual_seed(41)
    config = transformers.RobertaConfig(
        vocab_size=tiny_tokenizers.vocab_size("roberta-bpe"), hidden_size=32,
        num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=34, type_vocab_size=1, layer_norm_eps=1e-5, pad_token_id=1,
        bos_token_id=0, eos_token_id=2, num_labels=3)
    model = transformers.RobertaForSequenceClassification(config).eval()
    perturb_norms_and_biases(model)
    directory = os.path.join(HERE, "tiny-roberta")
    model.save_pretrained(directory)
    tiny_tokenizers.copy_tokenizer("roberta-bpe", directory)
    # roberta-base's tensors: the encoder with a pooler, and the masked-LM head.
    mlm = transformers.RobertaForMaskedLM(config)
    mlm.roberta.load_state_dict(model.roberta.state_dict())
    pooled = transformers.RobertaModel(config, add_pooling_layer=True)
    tensors = {k: v.contiguous() for k, v in mlm.state_dict().items()
               if not k.startswith("lm_head.decoder.")}  # tied: word embeddings, lm_head.bias
    tensors.update({"roberta.pooler." + k: v for k, v in pooled.pooler.state_dict().items()})
    mlm_directory = os.path.join(HERE, "tiny-roberta-mlm")
    os.makedirs(mlm_directory, exist_ok=True)
    mlm.config.save_pretrained(mlm_directory)
    safetensors.torch.save_file(tensors, os.path.join(mlm_directory, "model.safetensors"),
                                metadata={"format": "pt"})
    tiny_tokenizers.copy_tokenizer("roberta-bpe", mlm_directory)
    ids = torch.randint(4, config.vocab_size - 1, (2, 10))
    ids[:, 0] = 0  # <s>
    ids[0, 9] = 2  # </s>
    ids[1, 5] = 2
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    ids[1, 6:] = config.pad_token_id
    golden = golden_of(transformers.RobertaForSequenceClassification, directory, ids, mask,
                       torch.zeros_like(ids), torch.tensor([1, 2]))
    with open(os.path.join(HERE, "tiny-roberta-golden.json"), "w") as f:
        json.dump(golden, f)
    print(f"wrote {directory}, tiny-roberta-mlm and tiny-roberta-golden.json; loss "
          f"{golden['loss']:.6f}, logits {golden['logits']}")


def distilbert():
    torch.manual_seed(42)
    config = transformers.DistilBertConfig(
        vocab_size=tiny_tokenizers.vocab_size("bert-wordpiece"), dim=32, n_layers=2, n_heads=4,
        hidden_dim=64, max_position_embeddings=32, num_labels=3)
    model = transformers.DistilBertForSequenceClassification(config).eval()
    perturb_norms_and_biases(model)
    with torch.no_grad():  # DistilBERT's norms are not named LayerNorm
        for key, p in model.named_parameters():
            if "layer_norm" in key:
                p.add_(torch.randn_like(p) * 0.1)
    directory = save_with_pretrained_twin(model, "tiny-distilbert", transformers.DistilBertForMaskedLM,
                                          "tiny-distilbert-mlm", "distilbert", "bert-wordpiece")
    ids = torch.randint(1, config.vocab_size, (2, 10))
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    ids[1, 7:] = 0  # the pad token
    golden = golden_of(transformers.DistilBertForSequenceClassification, directory, ids, mask,
                       None, torch.tensor([0, 2]))
    with open(os.path.join(HERE, "tiny-distilbert-golden.json"), "w") as f:
        json.dump(golden, f)
    print(f"wrote {directory}, tiny-distilbert-mlm and tiny-distilbert-golden.json; loss "
          f"{golden['loss']:.6f}, logits {golden['logits']}")


def electra():
    torch.manual_seed(43)
    config = transformers.ElectraConfig(
        vocab_size=tiny_tokenizers.vocab_size("bert-wordpiece"), embedding_size=16,
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=32, num_labels=3)
    model = transformers.ElectraForSequenceClassification(config).eval()
    perturb_norms_and_biases(model)
    directory = save_with_pretrained_twin(model, "tiny-electra", transformers.ElectraForPreTraining,
                                          "tiny-electra-discriminator", "electra", "bert-wordpiece")
    ids = torch.randint(1, config.vocab_size, (2, 10))
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0
    ids[1, 5:] = 0  # the pad token
    types = torch.zeros_like(ids)
    types[0, 6:] = 1
    golden = golden_of(transformers.ElectraForSequenceClassification, directory, ids, mask, types,
                       torch.tensor([1, 0]))
    with open(os.path.join(HERE, "tiny-electra-golden.json"), "w") as f:
        json.dump(golden, f)
    print(f"wrote {directory}, tiny-electra-discriminator and tiny-electra-golden.json; loss "
          f"{golden['loss']:.6f}, logits {golden['logits']}")


def main():
    torch.manual_seed(40)
    config = transformers.BertConfig(vocab_size=tiny_tokenizers.vocab_size("bert-wordpiece"), hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=4, intermediate_size=64,
                                     max_position_embeddings=32, type_vocab_size=2, num_labels=3)
    model = transformers.BertForSequenceClassification(config).eval()
    perturb_norms_and_biases(model)
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
    golden = golden_of(transformers.BertForSequenceClassification, directory, ids, mask, types,
                       torch.tensor([2, 0]))
    with open(os.path.join(HERE, "tiny-bert-golden.json"), "w") as f:
        json.dump(golden, f)
    print(f"wrote {directory}, tiny-bert-encoder and tiny-bert-golden.json; loss "
          f"{golden['loss']:.6f}, logits {golden['logits']}")
    bert_pretraining(config, model.bert)
    roberta()
    distilbert()
    electra()


if __name__ == "__main__":
    main()
