"""bigbatch's built-in models in plain PyTorch, and the loader of bigbatch exports.

`bigbatch export` (the library's cli::export_model) writes MODEL.safetensors with every parameter
and buffer under the names below, and the model spec (JSON) in the file's metadata and beside it
in MODEL.json. This module rebuilds the same modules with the same parameter names and the same
forward math as the C++ models in src/bigbatch/models, so an export runs here unchanged:

    import bigbatch_torch
    model, spec = bigbatch_torch.load("model.safetensors")  # eval mode
    logits = model(bigbatch_torch.encode_texts(["Hello"], spec))

It needs only the standard library and torch (no safetensors package), and also serves as the
PyTorch reference peer of the C++ models: build_model(spec) gives a freshly initialised model,
initialised the way the C++ one is (not with the same numbers).
"""
import ctypes
import gzip
import json
import math
import struct
from collections import OrderedDict

import torch
import torch.nn.functional as F

SPEC_METADATA_KEY = "bigbatch_spec"

# safetensors dtype codes (those bigbatch writes and reads).
DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
    "U8": torch.uint8, "BOOL": torch.bool,
}


# --- safetensors -------------------------------------------------------------------------------

def read_safetensors(path):
    """(OrderedDict name -> tensor in header order, metadata dict) of a safetensors file."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError(f"{path}: {len(data)} bytes, fewer than the 8 of the header length")
    (length,) = struct.unpack("<Q", data[:8])
    if length > len(data) - 8:
        raise ValueError(f"{path}: header length {length} runs past the end of the file")
    header = json.loads(data[8:8 + length].decode("utf-8"), object_pairs_hook=OrderedDict)
    metadata = dict(header.pop("__metadata__", {}))
    body = memoryview(data)[8 + length:]
    tensors = OrderedDict()
    for name, entry in header.items():
        dtype = DTYPES[entry["dtype"]]
        begin, end = entry["data_offsets"]
        shape = entry["shape"]
        if end == begin:
            tensors[name] = torch.empty(shape, dtype=dtype)
        else:  # a copy of the bytes: aligned, writable, owned by the tensor
            tensors[name] = torch.frombuffer(bytearray(body[begin:end]), dtype=dtype).reshape(shape)
    return tensors, metadata


def write_safetensors(path, tensors, metadata=None):
    """Writes `tensors` (name -> tensor, in that order) and `metadata` (str -> str) as a
    safetensors file: the layout read_safetensors reads, the header padded with spaces to a
    multiple of 8 bytes as the safetensors package writes it."""
    codes = {dtype: code for code, dtype in DTYPES.items()}
    header, blobs, offset = OrderedDict(), [], 0
    if metadata:
        header["__metadata__"] = dict(metadata)
    for name, tensor in tensors.items():
        if tensor.dtype not in codes:
            raise ValueError(f"{path}: tensor {name!r} has dtype {tensor.dtype}, which "
                             f"write_safetensors does not write")
        data = tensor.detach().cpu().contiguous()
        blob = ctypes.string_at(data.data_ptr(), data.numel() * data.element_size())
        header[name] = {"dtype": codes[tensor.dtype], "shape": list(tensor.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


# --- shared pieces (models/transformer_parts) --------------------------------------------------

def maybe_dropout(x, p, training):
    """Dropout that is a no-op (and draws no random numbers) when p == 0."""
    return F.dropout(x, p, training) if p > 0.0 else x


def multi_head_attention(qkv, heads, blocked, dropout, training):
    """qkv (B, T, 3C), blocked bool broadcastable to (B, heads, T, T) -> (B, T, C)."""
    batch, time, three_c = qkv.shape
    embed = three_c // 3
    head_dim = embed // heads

    def split_heads(t):  # (B, T, C) -> (B, heads, T, head_dim)
        return t.view(batch, time, heads, head_dim).transpose(1, 2)

    q, k, v = (split_heads(part) for part in qkv.chunk(3, dim=-1))
    scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(head_dim))  # (B, h, T, T)
    scores = scores.masked_fill(blocked, float("-inf"))
    probs = maybe_dropout(torch.softmax(scores, dim=-1), dropout, training)
    y = torch.matmul(probs, v)  # (B, heads, T, head_dim)
    return y.transpose(1, 2).contiguous().view(batch, time, embed)


class SelfAttention(torch.nn.Module):
    """GPT's CausalSelfAttention and BERT's EncoderSelfAttention: `qkv`, `proj`."""

    def __init__(self, embed, heads, dropout):
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.qkv = torch.nn.Linear(embed, 3 * embed)
        self.proj = torch.nn.Linear(embed, embed)

    def forward(self, x, blocked):  # (B, T, C) -> (B, T, C)
        y = multi_head_attention(self.qkv(x), self.heads, blocked, self.dropout, self.training)
        return maybe_dropout(self.proj(y), self.dropout, self.training)


class FeedForward(torch.nn.Module):
    """GptMlp and EncoderMlp: fc -> GELU (exact) -> proj -> dropout."""

    def __init__(self, embed, dropout):
        super().__init__()
        self.dropout = dropout
        self.fc = torch.nn.Linear(embed, 4 * embed)
        self.proj = torch.nn.Linear(4 * embed, embed)

    def forward(self, x):
        return maybe_dropout(self.proj(F.gelu(self.fc(x))), self.dropout, self.training)


class Block(torch.nn.Module):
    """Pre-LN block: x + attn(ln1(x)), then + mlp(ln2(.)). `ln1`, `attn`, `ln2`, `mlp`."""

    def __init__(self, embed, heads, dropout):
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(embed)
        self.attn = SelfAttention(embed, heads, dropout)
        self.ln2 = torch.nn.LayerNorm(embed)
        self.mlp = FeedForward(embed, dropout)

    def forward(self, x, blocked):
        h = x + self.attn(self.ln1(x), blocked)
        return h + self.mlp(self.ln2(h))


def init_transformer(module, std=0.02):
    """GPT-2 / BERT initialisation: Linear and Embedding N(0, std), biases 0, LayerNorm 1 and 0."""
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, torch.nn.Linear):
                torch.nn.init.normal_(m.weight, 0.0, std)
                if m.bias is not None:
                    torch.nn.init.zeros_(m.bias)
            elif isinstance(m, torch.nn.Embedding):
                torch.nn.init.normal_(m.weight, 0.0, std)
            elif isinstance(m, torch.nn.LayerNorm):
                torch.nn.init.ones_(m.weight)
                torch.nn.init.zeros_(m.bias)


# --- the models ---------------------------------------------------------------------------------

class Gpt(torch.nn.Module):
    """models::Gpt: tok_embed + pos_embed -> dropout -> blocks -> ln_f -> head (no bias)."""

    def __init__(self, vocab=256, context=128, layers=4, heads=4, embed=128, dropout=0.0):
        super().__init__()
        self.context, self.dropout = context, dropout
        self.tok_embed = torch.nn.Embedding(vocab, embed)
        self.pos_embed = torch.nn.Embedding(context, embed)
        self.blocks = torch.nn.ModuleList(Block(embed, heads, dropout) for _ in range(layers))
        self.ln_f = torch.nn.LayerNorm(embed)
        self.head = torch.nn.Linear(embed, vocab, bias=False)
        init_transformer(self)
        with torch.no_grad():  # residual projections (GPT-2, section 2.3)
            for block in self.blocks:
                for proj in (block.attn.proj, block.mlp.proj):
                    torch.nn.init.normal_(proj.weight, 0.0, 0.02 / math.sqrt(2.0 * layers))

    def forward(self, inputs):  # (B, T) int64 -> logits (B, T, vocab)
        time = inputs.shape[1]
        future = torch.ones(time, time, dtype=torch.bool, device=inputs.device).triu(1)  # (T, T)
        positions = torch.arange(time, device=inputs.device)
        x = self.tok_embed(inputs) + self.pos_embed(positions)  # (B, T, C)
        x = maybe_dropout(x, self.dropout, self.training)
        for block in self.blocks:
            x = block(x, future)
        return self.head(self.ln_f(x))


class Mlp(torch.nn.Module):
    """models::Mlp: embed `context` bytes, concatenate, (Linear -> tanh -> dropout) x layers, head."""

    def __init__(self, vocab=256, context=8, embed=32, hidden=256, layers=2, dropout=0.0):
        super().__init__()
        self.dropout = dropout
        self.tok_embed = torch.nn.Embedding(vocab, embed)
        widths = [context * embed] + [hidden] * layers
        self.hidden = torch.nn.ModuleList(
            torch.nn.Linear(widths[i], widths[i + 1]) for i in range(layers))
        self.head = torch.nn.Linear(hidden, vocab)

    def forward(self, inputs):  # (B, context) int64 -> logits (B, vocab)
        x = self.tok_embed(inputs).reshape(inputs.shape[0], -1)
        for layer in self.hidden:
            x = torch.tanh(layer(x))
            if self.dropout > 0.0:
                x = F.dropout(x, self.dropout, self.training)
        return self.head(x)


def group_norm_groups(channels):
    """nn::group_norm_groups: the largest divisor G <= 32 of C with C / G >= 2, or 1."""
    for groups in range(min(32, channels // 2), 1, -1):
        if channels % groups == 0:
            return groups
    return 1


def make_norm(kind, channels):
    """nn::make_norm: BatchNorm (PyTorch's, the same names and semantics) or a GroupNorm."""
    if kind == "batch":
        return torch.nn.BatchNorm2d(channels)
    groups = {"group": group_norm_groups(channels), "layer": 1, "instance": channels}[kind]
    return torch.nn.GroupNorm(groups, channels)


def conv(in_channels, out_channels, kernel, stride):
    return torch.nn.Conv2d(in_channels, out_channels, kernel, stride=stride, padding=kernel // 2,
                           bias=False)


class BasicBlock(torch.nn.Module):
    """relu(norm1(conv1(x))) -> norm2(conv2(.)) + shortcut(x) -> relu."""

    def __init__(self, in_channels, out_channels, stride, norm):
        super().__init__()
        self.conv1 = conv(in_channels, out_channels, 3, stride)
        self.norm1 = make_norm(norm, out_channels)
        self.conv2 = conv(out_channels, out_channels, 3, 1)
        self.norm2 = make_norm(norm, out_channels)
        self.projects = stride != 1 or in_channels != out_channels
        if self.projects:
            self.shortcut_conv = conv(in_channels, out_channels, 1, stride)
            self.shortcut_norm = make_norm(norm, out_channels)

    def forward(self, x):
        h = torch.relu(self.norm1(self.conv1(x)))
        h = self.norm2(self.conv2(h))
        shortcut = self.shortcut_norm(self.shortcut_conv(x)) if self.projects else x
        return torch.relu(h + shortcut)


class ResNet(torch.nn.Module):
    """models::ResNet: stem, 3 stages of (depth - 2) / 6 BasicBlocks, global mean pool, head."""

    def __init__(self, depth=20, width=16, in_channels=1, classes=10, norm="batch"):
        super().__init__()
        self.stem_conv = conv(in_channels, width, 3, 1)
        self.stem_norm = make_norm(norm, width)
        blocks, channels = [], width
        for stage in range(3):
            out_channels = width << stage
            for i in range((depth - 2) // 6):
                stride = 2 if stage > 0 and i == 0 else 1
                blocks.append(BasicBlock(channels, out_channels, stride, norm))
                channels = out_channels
        self.blocks = torch.nn.ModuleList(blocks)
        self.head = torch.nn.Linear(channels, classes)
        with torch.no_grad():  # torchvision's initialisation
            for m in self.modules():
                if isinstance(m, torch.nn.Conv2d):
                    torch.nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, images):  # (B, C, H, W) floating -> logits (B, classes)
        x = torch.relu(self.stem_norm(self.stem_conv(images)))
        for block in self.blocks:
            x = block(x)
        return self.head(x.mean((2, 3)))


class Bert(torch.nn.Module):
    """models::Bert: [CLS] + tokens, + positions -> dropout -> blocks (key padding mask) ->
    ln_f on [CLS] -> head."""

    def __init__(self, vocab=257, pad_id=256, context=256, layers=2, heads=4, embed=128,
                 classes=2, dropout=0.1):
        super().__init__()
        self.pad_id, self.dropout = pad_id, dropout
        self.cls = torch.nn.Parameter(torch.zeros(embed))
        self.tok_embed = torch.nn.Embedding(vocab, embed)
        self.pos_embed = torch.nn.Embedding(context + 1, embed)
        self.blocks = torch.nn.ModuleList(Block(embed, heads, dropout) for _ in range(layers))
        self.ln_f = torch.nn.LayerNorm(embed)
        self.head = torch.nn.Linear(embed, classes)
        init_transformer(self)
        with torch.no_grad():
            torch.nn.init.normal_(self.cls, 0.0, 0.02)

    def forward(self, inputs):  # (B, T) int64 padded with pad_id -> logits (B, classes)
        batch, time = inputs.shape
        embed = self.cls.shape[0]
        key_padding = torch.cat(  # (B, S = T + 1); [CLS] is never padding
            [torch.zeros(batch, 1, dtype=torch.bool, device=inputs.device),
             inputs.eq(self.pad_id)], dim=1)
        positions = torch.arange(time + 1, device=inputs.device)
        cls_column = self.cls.view(1, 1, embed).expand(batch, 1, embed)
        x = torch.cat([cls_column, self.tok_embed(inputs)], dim=1) + self.pos_embed(positions)
        x = maybe_dropout(x, self.dropout, self.training)
        blocked = key_padding.view(batch, 1, 1, time + 1)
        for block in self.blocks:
            x = block(x, blocked)
        return self.head(self.ln_f(x[:, 0]))


MODELS = {"gpt": Gpt, "mlp": Mlp, "resnet": ResNet, "bert": Bert}


def build_model(spec):
    """A freshly initialised model of a spec (dict), in its dtype and in training mode."""
    if spec.get("format") != "bigbatch-model" or spec.get("version") != 1:
        raise ValueError(f"not a bigbatch model spec of version 1: {spec!r}")
    model = MODELS[spec["kind"]](**spec["options"])
    return model.to({"float32": torch.float32, "float64": torch.float64}[spec["dtype"]])


def load(path):
    """(model in eval mode with the export's weights and buffers, spec dict) of a bigbatch export."""
    tensors, metadata = read_safetensors(path)
    if SPEC_METADATA_KEY not in metadata:
        raise ValueError(f"{path}: not a bigbatch export (no {SPEC_METADATA_KEY} in the metadata)")
    spec = json.loads(metadata[SPEC_METADATA_KEY])
    model = build_model(spec)
    model.load_state_dict(tensors, strict=True)
    return model.eval(), spec


# --- input preprocessing, as in training ---------------------------------------------------------

def encode_texts(texts, spec):
    """Byte ids (B, context) int64 of `texts` (str or bytes) for a bert: each cut to its first
    `context` bytes and padded at the end with pad_id (data::FortuneDataset)."""
    context, pad_id = spec["input"]["context"], spec["input"]["pad_id"]
    rows = torch.full((len(texts), context), pad_id, dtype=torch.int64)
    for i, text in enumerate(texts):
        data = (text.encode("utf-8") if isinstance(text, str) else bytes(text))[:context]
        rows[i, :len(data)] = torch.tensor(list(data), dtype=torch.int64)
    return rows


def preprocess_images(images, spec):
    """uint8 images (N, H, W) or (N, C, H, W) -> (N, C, H, W) in the model's dtype, as
    data::ImageDataset normalises them: (pixel / 255 - mean[c]) / std[c] in float32."""
    image = spec["input"]
    if images.dim() == 3:
        images = images.unsqueeze(1)
    channels = images.shape[1]

    def per_channel(values):
        return torch.tensor(values, dtype=torch.float32).expand(channels).view(1, channels, 1, 1)

    x = images.to(torch.float32).div(255.0).sub(per_channel(image["mean"]))
    x = x.div(per_channel(image["std"]))
    return x.to({"float32": torch.float32, "float64": torch.float64}[spec["dtype"]])


def read_idx(path):
    """The uint8 array of an IDX file (gzip-compressed or raw), e.g. (N, 28, 28)."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    if data[:2] != b"\0\0" or data[2] != 0x08:
        raise ValueError(f"{path}: not an IDX file of unsigned bytes")
    rank = data[3]
    dims = struct.unpack(f">{rank}I", data[4:4 + 4 * rank])
    body = bytearray(data[4 + 4 * rank:])
    if len(body) != math.prod(dims):
        raise ValueError(f"{path}: {len(body)} data bytes, the header promises {math.prod(dims)}")
    return torch.frombuffer(body, dtype=torch.uint8).reshape(dims)
