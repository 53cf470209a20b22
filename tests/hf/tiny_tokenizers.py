"""The tokenizer fixtures of tests/hf/tokenizers/ (tests/text/make_tokenizer_fixtures.py) that the
tiny models of make_tiny_*.py carry: their vocabulary size, and their files copied beside a model,
so that each tiny model directory is complete in Hugging Face's layout (config, weights,
tokenizer) for bigbatch train's model.kind = "hf"."""
import json
import os
import shutil

HERE = os.path.dirname(os.path.abspath(__file__))
FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
         "chat_template.jinja")


def vocab_size(fixture):
    """The number of ids of a fixture: its largest vocabulary or added-token id + 1."""
    with open(os.path.join(HERE, "tokenizers", fixture, "tokenizer.json")) as f:
        tokenizer = json.load(f)
    vocab = tokenizer["model"]["vocab"]
    ids = list(vocab.values()) if isinstance(vocab, dict) else list(range(len(vocab)))
    ids += [token["id"] for token in tokenizer["added_tokens"]]
    return max(ids) + 1


def copy_tokenizer(fixture, directory):
    """Copies the fixture's tokenizer files into the model directory."""
    for name in FILES:
        source = os.path.join(HERE, "tokenizers", fixture, name)
        if os.path.exists(source):
            shutil.copyfile(source, os.path.join(directory, name))


def rounded(tensor):
    """The values of a float32 tensor, flattened, to 8 significant digits (float32 holds about 7):
    golden files a third the size, the values unchanged within 1e-7 relative."""
    return [float(f"{x:.8g}") for x in tensor.flatten().tolist()]
