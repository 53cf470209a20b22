"""--model hf: a model directory in Hugging Face's layout, on the data `bigbatch train` gives it.

`bigbatch train -s model.kind=hf -s model.path=DIR` (docs/PRETRAINED.md) trains what the
architecture is for; this module builds the same work for bench/peer.py, read and split as
src/bigbatch/job/hf_workload.cpp does:

- a causal LM (llama, mistral, qwen2, gpt2): every document of --data (a fortune between `%`
  lines, or a whole file; data::read_documents) tokenized without special tokens, EOS after each,
  the training documents packed into one stream and cut into blocks of `context` tokens: sample
  i has inputs tokens[i*T .. i*T + T - 1] and targets tokens[i*T + 1 .. i*T + T], the last,
  partial block padded with EOS and targets -100 (data::PackedTokenDataset); a per-token loss;
- a classifier (bert, modernbert): which collection of --data (every fortune file with at least
  `min_per_class` fortunes, one class each, in name order) a fortune comes from, each text
  tokenized with its special tokens ([CLS] ... [SEP]) and cut to `context` keeping [SEP], all
  right-padded to the longest; the attention mask is input_ids != pad (data::FortuneCollections,
  data::TokenClassificationDataset); a per-sample loss.

The held-out documents (per class for the classifier) are bigbatch's: round(val_fraction x n) of
them drawn with its seeded permutation (bench/data_order.py's copy of
data::epoch_permutation), so the training samples are the ones bigbatch trains on. The model is
transformers' `from_pretrained` of the directory (a classifier's head fresh, from torch's
generator as seeded by peer.py, when the checkpoint has none or one of another number of
classes, as bigbatch does), with transformers' default attention.
"""
import math
import os

import torch

from data_order import epoch_permutation

IGNORE_INDEX = -100
CLASSIFIER_TYPES = ("bert", "modernbert")


class HfLogits(torch.nn.Module):
    """A transformers model whose forward maps token ids to logits, as the bigbatch_torch models'
    do (what peer.micro_loss, torch.compile, Accelerate and Lightning train): a causal LM's
    (B, T, vocab), or a classifier's (B, classes) with the attention mask inputs != pad_id.
    `hf` is the transformers model itself, which the HF Trainer trains with its own loss."""

    def __init__(self, hf, pad_id=None):
        super().__init__()
        self.hf = hf
        self.pad_id = pad_id

    def forward(self, inputs):  # (B, T) int64 -> logits
        mask = None if self.pad_id is None else inputs.ne(self.pad_id)
        return self.hf(input_ids=inputs, attention_mask=mask).logits

    def attention_macs(self, time_steps):
        """Multiply-adds of one sample's attention products (scores q k^T and probs v) in every
        layer: 2 x T^2 x heads x head_dim, the full T x T (a causal mask after the products)."""
        config = self.hf.config
        heads = config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        return config.num_hidden_layers * 2 * time_steps * time_steps * heads * head_dim


class PackedTokens:
    """data::PackedTokenDataset over the training documents' stream (get: inputs (B, T), targets
    (B, T) int64, the count of targets that are not -100)."""

    def __init__(self, stream, val_stream, context, eos_id):
        self.context = context
        self.size = (stream.numel() - 2) // context + 1
        positions = self.size * context
        valid = stream.numel() - 1  # positions with a next token
        self.inputs = torch.full((positions,), eos_id, dtype=torch.int32)
        self.inputs[:valid] = stream[:-1]
        self.targets = torch.full((positions,), IGNORE_INDEX, dtype=torch.int32)
        self.targets[:valid] = stream[1:]
        self.inputs, self.targets = self.inputs.view(-1, context), self.targets.view(-1, context)
        # bigbatch holds the token ids in std::vectors, outside its tensor count.
        self.host_tensors = (self.inputs, self.targets, val_stream)

    def get(self, indices):
        targets = self.targets[indices].long()
        return self.inputs[indices].long(), targets, int(targets.ne(IGNORE_INDEX).sum())

    def model_inputs(self, inputs, targets):
        """The HF Trainer's batch: the model's own loss on exactly these targets (`shift_labels`:
        the targets as they are, not shifted again; the Trainer counts them for
        num_items_in_batch)."""
        return {"input_ids": inputs, "labels": targets, "shift_labels": targets}


class ClassifiedTexts:
    """data::TokenClassificationDataset (get: inputs (B, L) right-padded with pad_id, targets (B)
    class ids, the count of samples)."""

    def __init__(self, sequences, labels, val_sequences, pad_id):
        self.length = max(len(s) for s in sequences + val_sequences)
        self.ids = padded(sequences, self.length, pad_id)
        self.labels = torch.tensor(labels, dtype=torch.int64)
        self.size, self.pad_id = len(sequences), pad_id
        # The share of the padded training positions that hold real tokens (peer.py's FLOPs).
        self.real_share = sum(len(s) for s in sequences) / (len(sequences) * self.length)
        self.host_tensors = (self.ids, self.labels, padded(val_sequences, self.length, pad_id))

    def get(self, indices):
        return self.ids[indices], self.labels[indices], indices.numel()

    def model_inputs(self, inputs, targets):
        """The HF Trainer's batch: the model's own loss, with its attention mask."""
        return {"input_ids": inputs, "attention_mask": inputs.ne(self.pad_id), "labels": targets}


def padded(sequences, length, pad_id):
    """(N, length) int64: each sequence, then pad_id."""
    ids = torch.full((len(sequences), length), pad_id, dtype=torch.int64)
    for row, sequence in enumerate(sequences):
        ids[row, :len(sequence)] = torch.tensor(sequence, dtype=torch.int64)
    return ids


# --- bigbatch's text data (src/bigbatch/data) ----------------------------------------------------

def is_blank(text):
    return not text.strip(" \t\r\n\v\f")


def split_fortunes(text):
    """data::split_fortunes: the fortunes between lines of exactly "%" (or "%\\r"), each without
    the line break ending its last line; blank ones dropped."""
    fortunes, current = [], []

    def finish():
        fortune = "".join(current)
        fortune = fortune[:-1] if fortune.endswith("\n") else fortune
        fortune = fortune[:-1] if fortune.endswith("\r") else fortune
        if not is_blank(fortune):
            fortunes.append(fortune)
        current.clear()

    lines = text.split("\n")
    for number, line in enumerate(lines):
        if line in ("%", "%\r"):
            finish()
        else:
            current.append(line if number == len(lines) - 1 else line + "\n")
    finish()
    return fortunes


def text_files(path):
    """data::read_text_files (or the one file `path`): [(name, text)] in name order; hidden
    files, *.dat, *.u8, symbolic links and files holding a NUL byte left out."""
    if not os.path.isdir(path):
        return [(path, open(path, "rb").read().decode("utf-8"))]
    files = []
    for name in sorted(os.listdir(path)):
        full = os.path.join(path, name)
        if (name.startswith(".") or name.endswith((".dat", ".u8")) or os.path.islink(full)
                or not os.path.isfile(full)):
            continue
        data = open(full, "rb").read()
        if b"\0" not in data:
            files.append((name, data.decode("utf-8")))
    return files


def held_out(n, fraction, seed, epoch=0):
    """Whether each of n items is held out: round(fraction x n) of them (at most n - 1), the
    first of epoch_permutation(n, seed, epoch) (hf_workload's held_out, FortuneCollections'
    per-class test split)."""
    count = min(n - 1, math.floor(fraction * n + 0.5))
    held = [False] * n
    for i in epoch_permutation(n, seed, epoch)[:count]:
        held[i] = True
    return held


def encode(tokenizer, texts, special_tokens):
    """Token ids of each text (transformers' fast tokenizer, as bigbatch's text::Tokenizer)."""
    return tokenizer(texts, add_special_tokens=special_tokens, verbose=False)["input_ids"]


def special_tokens_after(tokenizer):
    """How many special tokens the tokenizer puts after a text (BERT's [SEP]: 1)."""
    plain = encode(tokenizer, ["a"], False)[0]
    framed = encode(tokenizer, ["a"], True)[0]
    for start in range(len(framed) - len(plain) + 1):
        if plain and framed[start:start + len(plain)] == plain:
            return len(framed) - start - len(plain)
    return 0


def truncated(ids, context, after):
    """hf_workload's encode_truncated: at most `context` ids, the last `after` ones kept."""
    return ids if len(ids) <= context else ids[:context - after] + ids[len(ids) - after:]


# --- the two tasks --------------------------------------------------------------------------------

def packed_documents(tokenizer, data_path, context, val_fraction, seed):
    """The causal-LM data: bigbatch's add_document_data."""
    documents = [d for _, text in text_files(data_path) for d in split_fortunes(text)]
    held = held_out(len(documents), val_fraction, seed)
    eos = tokenizer.eos_token_id
    streams = {True: [], False: []}
    for is_held, ids in zip(held, encode(tokenizer, documents, False)):
        streams[is_held].extend(ids + [eos])
    return PackedTokens(torch.tensor(streams[False], dtype=torch.int32),
                        torch.tensor(streams[True], dtype=torch.int32), context, eos)


def fortune_classes(tokenizer, data_path, context, val_fraction, seed, min_per_class):
    """The classification data: bigbatch's classification_data over FortuneCollections; returns
    (data, class names)."""
    collections = [(name, split_fortunes(text)) for name, text in text_files(data_path)]
    chosen = [(name, fortunes) for name, fortunes in collections if len(fortunes) >= min_per_class]
    after = special_tokens_after(tokenizer)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (
        tokenizer.eos_token_id if tokenizer.eos_token_id is not None else 0)
    splits = {True: ([], []), False: ([], [])}
    for label, (_, fortunes) in enumerate(chosen):
        held = held_out(len(fortunes), val_fraction, seed, epoch=label)
        for is_held, ids in zip(held, encode(tokenizer, fortunes, True)):
            splits[is_held][0].append(truncated(ids, context, after))
            splits[is_held][1].append(label)
    data = ClassifiedTexts(splits[False][0], splits[False][1], splits[True][0], pad)
    return data, [name for name, _ in chosen]


def load(model_dir, data_path, context, seed, val_fraction=0.1, min_per_class=50):
    """(model: HfLogits, data, token_loss) of `bigbatch train -s model.kind=hf -s
    model.path=model_dir -s data.path=data_path -s hf.context=context` with bigbatch's defaults
    data.val_fraction 0.1, data.min_per_class 50 and train.seed = seed. A classifier is loaded
    after its data is read: its head has as many classes as the data."""
    import transformers

    config = transformers.AutoConfig.from_pretrained(model_dir)
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    if config.model_type in CLASSIFIER_TYPES:
        data, classes = fortune_classes(tokenizer, data_path, context, val_fraction, seed,
                                        min_per_class)
        hf = transformers.AutoModelForSequenceClassification.from_pretrained(
            model_dir, num_labels=len(classes), ignore_mismatched_sizes=True)
        return HfLogits(hf, pad_id=data.pad_id), data, False
    data = packed_documents(tokenizer, data_path, context, val_fraction, seed)
    hf = transformers.AutoModelForCausalLM.from_pretrained(model_dir)
    return HfLogits(hf), data, True
