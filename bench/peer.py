#!/usr/bin/python3
"""The Python PyTorch peer of `bigbatch train`: the standard gradient-accumulation loop.

Same models (python/bigbatch_torch.py: the C++ models' names and forward math), sizes, data,
optimizer, clipping, schedule and precision as bigbatch's built-in jobs, or (`--model hf
--hf-model DIR`) transformers' model of a Hugging Face directory on the data bigbatch's
model.kind = "hf" gives it (bench/peers/hf_models.py); the loop is the one the PyTorch
documentation and most training scripts use:

    for each window:  for each micro-batch:  loss = sum-loss / window count;  loss.backward()
                      clip_grad_norm_;  optimizer.step();  scheduler.step();  zero_grad(None)

It writes one JSON line per window (tokens/s, samples/s over the window's wall time, as
bigbatch's metrics.jsonl), then one profiled window for peak tensor memory, then a summary line.
Standard library and torch only (the trainer loops below: their libraries too). Usage
(bench/compare runs it):

    OPENBLAS_CORETYPE=SkylakeX bench/peer.py --model gpt --precision bf16 --steps 20 \
        --global-batch 64 --micro-batch 8 --threads 2 --out peer.jsonl

`--loop` picks who runs that work, on the same model, data order, optimizer, schedule, clipping
and precision, with the same records: `eager` (the loop above, the default), `compile` (the same
loop with the model and its loss under torch.compile; the summary adds compile_seconds), and the
trainers users run it with, in bench/peers/ (which import this file's pieces): `hf-trainer`
(transformers.Trainer), `accelerate` (accelerate.Accelerator.accumulate) and `lightning`
(lightning.Trainer), on the CPU. docs/BENCHMARKS.md says how each is used and measured.

On a GPU (`--device cuda`, scripts/gpu-check runs it): the model and the data live on the GPU,
autocast runs on CUDA (fp16 with torch.amp.GradScaler: scaled backward per micro-batch; unscale,
clip, step and update once per window), every timed window is bracketed by
torch.cuda.synchronize(), and each window's record carries its peak_bytes
(torch.cuda.max_memory_allocated, reset at the window's start: the caching allocator's count,
as bigbatch's on CUDA), which replaces the profiled window. The GPT's attention is
F.scaled_dot_product_attention(is_causal=True) there (`--attention`), the kernel bigbatch's
model.attention = "auto" takes on a GPU. The CPU path is unchanged.

    bench/peer.py --device cuda --model gpt --gpt-layers 8 --gpt-embed 512 --gpt-heads 8 \
        --gpt-context 256 --micro-batch 8 --precision fp16 --steps 1000 --max-seconds 12
"""
import argparse
import ctypes
import gc
import json
import math
import os
import shutil
import sys
import time
import warnings

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import bigbatch_torch  # noqa: E402  (the models, after the path is set)
import data_order  # noqa: E402  (bench/, this file's directory)

FORTUNES = "/usr/share/games/fortunes"
FASHION = "/usr/share/datasets/fashion-mnist"


# --- data: the bytes and samples bigbatch's data/ reads ------------------------------------------

def read_corpus(path, val_fraction=0.1, split_block=4096):
    """data::TextCorpus: a file, or a directory's regular non-symlink files not ending in .dat in
    file-name order, concatenated; every period-th block of split_block bytes is validation (the
    blocks shrink to len // period bytes where there would be fewer than period of them)."""
    if os.path.isdir(path):
        names = sorted(n for n in os.listdir(path)
                       if not n.endswith(".dat") and os.path.isfile(os.path.join(path, n))
                       and not os.path.islink(os.path.join(path, n)))
        data = b"".join(open(os.path.join(path, n), "rb").read() for n in names)
    else:
        data = open(path, "rb").read()
    period = max(2, math.floor(1.0 / val_fraction + 0.5))
    block = split_block
    if (len(data) + block - 1) // block < period:
        block = max(1, len(data) // period)
    blocks = [data[i:i + block] for i in range(0, len(data), block)]
    train = b"".join(b for i, b in enumerate(blocks) if i % period != period - 1)
    val = b"".join(b for i, b in enumerate(blocks) if i % period == period - 1)
    return tuple(torch.frombuffer(bytearray(part), dtype=torch.uint8) if part
                 else torch.empty(0, dtype=torch.uint8) for part in (train, val))


class Sequences:
    """data::SequenceDataset: sample i covers bytes [i*T, i*T + T], inputs the first T, targets
    the last T; (n - 2) // T + 1 samples of n bytes, the last one's positions past the end with
    input 0 and target -100 (ignored), as data::next_token_batch cuts them."""

    def __init__(self, corpus, context):
        self.data, self.val = corpus  # bigbatch keeps both splits (in std::vectors, not tensors)
        self.context = context
        self.size = (self.data.numel() - 2) // context + 1
        self.offsets = torch.arange(context + 1)
        # Whether the last sample runs past the end (n - 1 is not a multiple of T).
        self.partial = (self.size - 1) * context + context > self.data.numel() - 1

    def get(self, indices):  # -> inputs (B, T), targets (B, T) int64, tokens counted
        positions = indices.view(-1, 1) * self.context + self.offsets  # (B, T + 1)
        # On the CPU, look: most windows lack the last sample. On a GPU that would wait for it,
        # so mask every micro-batch and count there (the loop reads the count once a window).
        on_cpu = indices.device.type == "cpu"
        if not self.partial or (on_cpu and not bool((indices == self.size - 1).any())):
            rows = self.data[positions].long()  # (B, T + 1)
            return rows[:, :-1], rows[:, 1:], rows.shape[0] * self.context
        last = self.data.numel() - 1
        rows = self.data[positions.clamp(max=last)].long()  # (B, T + 1)
        past = positions[:, 1:] > last  # (B, T): no next byte there
        targets = rows[:, 1:].masked_fill(past, -100)
        count = targets.ne(-100).sum()
        return rows[:, :-1].masked_fill(past, 0), targets, int(count) if on_cpu else count


class Contexts:
    """data::ContextDataset: sample i has inputs bytes[i .. i + k - 1] and target bytes[i + k]."""

    def __init__(self, corpus, context):
        self.data, self.val = corpus
        self.context = context
        self.size = self.data.numel() - context
        self.offsets = torch.arange(context + 1)

    def get(self, indices):  # -> inputs (B, k), targets (B,) int64, samples counted
        rows = self.data[indices.view(-1, 1) + self.offsets].long()  # (B, k + 1)
        return rows[:, :-1], rows[:, -1], rows.shape[0]


class Images:
    """data::ImageDataset: uint8 images kept as they are, each micro-batch scaled to [0, 1] and
    normalised with the training images' per-channel mean and deviation."""

    def __init__(self):
        self.images = bigbatch_torch.read_idx(f"{FASHION}/train-images-idx3-ubyte.gz").unsqueeze(1)
        self.labels = bigbatch_torch.read_idx(f"{FASHION}/train-labels-idx1-ubyte.gz").long()
        self.val = (bigbatch_torch.read_idx(f"{FASHION}/t10k-images-idx3-ubyte.gz"),  # as bigbatch
                    bigbatch_torch.read_idx(f"{FASHION}/t10k-labels-idx1-ubyte.gz"))
        total = squares = 0.0  # exact sums of pixels and their squares, in chunks
        for chunk in self.images.split(4096):
            chunk = chunk.double()
            total += chunk.sum().item()
            squares += chunk.square().sum().item()
        count = self.images.numel()
        self.mean = total / count / 255.0
        self.std = math.sqrt(max(0.0, squares / count - (total / count) ** 2)) / 255.0
        self.size = self.images.shape[0]

    def get(self, indices):  # -> images (B, 1, 28, 28) float32, labels (B,), samples counted
        x = self.images[indices].float().div_(255.0).sub_(self.mean).div_(self.std)
        return x, self.labels[indices], indices.numel()


# --- the jobs: bigbatch's defaults (configs/*.toml) ----------------------------------------------

def build_job(kind, args):
    """(model, dataset, optimizer factory, max_grad_norm, token_loss) of a built-in job."""
    if kind == "gpt":  # [gpt] context 64, 4 layers, 4 heads, width 128 (--gpt-*); AdamW 4e-3
        model = bigbatch_torch.Gpt(context=args.gpt_context, layers=args.gpt_layers,
                                   heads=args.gpt_heads, embed=args.gpt_embed)
        return model, Sequences(read_corpus(args.data), args.gpt_context), adamw, 1.0, True
    if kind == "mlp":  # [mlp] context 8, embed 32, 2 x 256 hidden
        model = bigbatch_torch.Mlp(context=8, embed=32, hidden=256, layers=2)
        return model, Contexts(read_corpus(args.data), 8), adamw, 1.0, False
    if kind == "resnet":  # configs/resnet-fashion-mnist.toml: ResNet-8, width 16, BatchNorm; SGD
        model = bigbatch_torch.ResNet(depth=8, width=16, in_channels=1, classes=10, norm="batch")
        return model, Images(), sgd, 0.0, False
    if kind == "hf":  # model.kind = "hf" (bench/peers/hf_models.py); AdamW at --lr
        if not args.hf_model or args.hf_context < 1:
            sys.exit("peer.py: --model hf needs --hf-model DIR and --hf-context (hf.context)")
        from peers import hf_models
        model, data, token_loss = hf_models.load(args.hf_model, args.data, args.hf_context,
                                                 args.seed)
        return model, data, lambda m: adamw(m, lr=args.lr), 1.0, token_loss
    raise SystemExit(f"unknown model {kind!r}: gpt, mlp, resnet or hf")


def load_initial(model, args):
    """--init-from: the built-in model's parameters and buffers from a safetensors state_dict,
    every one of them (load_state_dict's strict check names what is missing or extra)."""
    if args.model == "hf":
        sys.exit("peer.py: --init-from is for the built-in models; an hf model starts from "
                 "--hf-model's weights (--save-initial writes such a directory)")
    try:
        state, _ = bigbatch_torch.read_safetensors(args.init_from)
        model.load_state_dict(state, strict=True)
    except (OSError, ValueError, KeyError, RuntimeError) as error:
        sys.exit(f"peer.py: --init-from {args.init_from}: {error}")


def save_initial(model, args):
    """--save-initial: the model as it starts, for bigbatch and the other peers to start from."""
    if args.model == "hf":
        shutil.copytree(args.hf_model, args.save_initial, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("*.safetensors", "*.bin", "*.index.json"))
        model.hf.save_pretrained(args.save_initial, safe_serialization=True)
        return
    bigbatch_torch.write_safetensors(args.save_initial, model.state_dict(), {"format": "pt"})


def decay_groups(model, weight_decay):
    """engine/optimizer: weight decay on matrices and kernels (dim >= 2) only."""
    params = [p for p in model.parameters() if p.requires_grad]
    return [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]


def adamw(model, lr=4e-3):
    return torch.optim.AdamW(decay_groups(model, 0.1), lr=lr, betas=(0.9, 0.99), eps=1e-8)


def sgd(model):
    return torch.optim.SGD(decay_groups(model, 5e-4), lr=0.1, momentum=0.9, nesterov=True)


def warmup_cosine(steps, warmup=20, min_ratio=0.1):
    def factor(step):  # the factor of optimizer step `step` (0-based)
        if step < warmup:
            return (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, steps - warmup))
        return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))
    return factor


# --- model FLOPs ---------------------------------------------------------------------------------

def train_flops_per_sample(model, inputs):
    """Model FLOPs of one sample's forward and backward: 3 x the forward's multiply-adds x 2, over
    Linear and Conv2d layers (hooks on a one-sample forward) and, for the GPT and the hf models,
    attention's two batched products (scores q k^T and probs v: 2 x T^2 x C multiply-adds per
    layer, C = heads x head_dim; the causal mask is applied after the full products, so the full
    T x T is counted). Norms, activations, softmax, rotary embeddings, embeddings and the
    optimizer are not counted. Of a padded classifier's data (hf_models.ClassifiedTexts), only
    the real tokens' share is counted (`real_share`, the mean over its training texts; applied
    alike to attention's products, a small part): the work the model needs, which a side that
    skips padding does alone."""
    macs = []

    def hook(module, args, output):
        if isinstance(module, torch.nn.Linear):
            macs.append(output.numel() * module.in_features)
        else:  # Conv2d: every output element is a dot product over in_channels x kernel
            kernel = module.kernel_size[0] * module.kernel_size[1]
            macs.append(output.numel() * module.in_channels // module.groups * kernel)

    handles = [m.register_forward_hook(hook) for m in model.modules()
               if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d))]
    with torch.no_grad():
        model(inputs[:1])
    for h in handles:
        h.remove()
    total = sum(macs)
    if isinstance(model, bigbatch_torch.Gpt):
        time_steps, width = inputs.shape[1], model.tok_embed.embedding_dim
        total += len(model.blocks) * 2 * time_steps * time_steps * width
    elif hasattr(model, "attention_macs"):  # hf_models.HfLogits
        total += model.attention_macs(inputs.shape[1])
    return 3 * 2 * total


# --- memory ---------------------------------------------------------------------------------------

def live_tensor_bytes(not_counted):
    """Bytes of the distinct storages of every tensor Python can reach (parameters, optimizer
    state, data set), less those of the tensors `not_counted`."""
    storages = {}
    with warnings.catch_warnings():  # isinstance on deprecated torch objects warns
        warnings.simplefilter("ignore")
        for obj in gc.get_objects():
            if isinstance(obj, torch.Tensor) and obj.device.type == "cpu":
                try:
                    storage = obj.storage()
                    storages[storage.data_ptr()] = storage.nbytes()
                except RuntimeError:  # torch.compile's fake tensors left from tracing: no data
                    pass
    for tensor in not_counted:
        storages.pop(tensor.storage().data_ptr(), None)
    return sum(storages.values())


def window_peak_bytes(events, baseline):
    """baseline + the highest running sum of the profiler's CPU allocation events ([memory]:
    +bytes allocated, -bytes freed), in time order."""
    def start(e):  # 2.x's events have start_ns(), 1.13's start_us()
        return e.start_ns() if hasattr(e, "start_ns") else e.start_us() * 1000

    deltas = [(start(e), i, e.nbytes()) for i, e in enumerate(events)
              if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU]
    running = peak = 0
    for _, _, nbytes in sorted(deltas):
        running += nbytes
        peak = max(peak, running)
    return baseline + peak


def peak_rss_bytes():
    """VmHWM of this process (peak resident set)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def openblas_core():
    try:
        blas = ctypes.CDLL("libblas.so.3")
        blas.openblas_get_corename.restype = ctypes.c_char_p
        return blas.openblas_get_corename().decode()
    except (OSError, AttributeError):
        return ""


def gemm_peak(seconds=1.0):
    """{"fp32": GFLOP/s, "bf16": GFLOP/s}: the best of torch.mm on n x n matrices, n = 1024 and
    2048, each timed for about `seconds` after a warm-up product, with this process's threads
    (bigbatch doctor's measurement, at the thread settings of the runs)."""
    best = {}
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        for n in (1024, 2048):
            a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
            torch.mm(a, b)
            count, start = 0, time.perf_counter()
            while count == 0 or time.perf_counter() - start < seconds:
                torch.mm(a, b)
                count += 1
            rate = 2 * n ** 3 * count / (time.perf_counter() - start) / 1e9
            best[name] = max(best.get(name, 0.0), rate)
    return best


# --- the GPU -------------------------------------------------------------------------------------

def fused_causal_attention(qkv, heads, blocked, dropout, training):
    """bigbatch_torch.multi_head_attention with F.scaled_dot_product_attention(is_causal=True):
    the same math for the GPT's causal mask (`blocked` is its (T, T) future mask), through the
    fused kernel (flash attention on CUDA), which keeps no (T, T) probabilities for backward."""
    batch, time, three_c = qkv.shape
    embed = three_c // 3
    q, k, v = (part.view(batch, time, heads, embed // heads).transpose(1, 2)
               for part in qkv.chunk(3, dim=-1))
    y = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout if training else 0.0,
                                       is_causal=True)
    return y.transpose(1, 2).contiguous().view(batch, time, embed)


def move_data(data, device):
    """Puts a data set's tensors on `device`: sample gathering then runs there too."""
    for name in ("data", "val", "offsets", "images", "labels"):
        if isinstance(getattr(data, name, None), torch.Tensor):
            setattr(data, name, getattr(data, name).to(device))


def refuse_unusable_cuda(args):
    """Exits with a clear message where --device cuda cannot run."""
    if args.device == "cuda" and not torch.cuda.is_available():
        built = (f"built with CUDA {torch.version.cuda}" if torch.version.cuda
                 else "built without CUDA")
        sys.exit(f"peer.py: --device cuda needs a CUDA GPU, but torch.cuda.is_available() is "
                 f"False here (torch {torch.__version__}, {built}); use --device cpu")
    if args.device == "cpu" and args.precision == "fp16":
        sys.exit("peer.py: --precision fp16 runs on CUDA only (with a GradScaler); on the CPU "
                 "use fp32 or bf16")


def timed_cuda_windows(args, train_window, emit):
    """The timed windows on the GPU: synchronised before and after, each with its own peak.
    Returns the highest window peak."""
    started, highest = None, 0
    for step in range(1, args.steps + 1):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        started = start if started is None else started
        samples, tokens, loss = train_window()
        torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        peak = torch.cuda.max_memory_allocated()
        highest = max(highest, peak)
        emit({"type": "window", "step": step, "loss": loss, "step_seconds": seconds,
              "samples_per_second": samples / seconds, "tokens_per_second": tokens / seconds,
              "peak_bytes": peak})
        if args.max_seconds > 0 and time.perf_counter() - started >= args.max_seconds:
            break
    return highest


def summarise_cuda(args, emit, params, flops, attention, scaler, peak):
    """The summary line of a GPU run: peak_bytes is the highest window peak."""
    emit({"type": "summary", "device": "cuda", "gpu": torch.cuda.get_device_name(),
          "peak_bytes": peak, "peak_rss_bytes": peak_rss_bytes(),
          "parameters": sum(p.numel() for p in params), "train_flops_per_sample": flops,
          "torch": torch.__version__, "cuda": torch.version.cuda, "precision": args.precision,
          "attention": attention, "matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
          "optimizer": "torch.optim.AdamW (PyTorch's default implementation for CUDA tensors)",
          "final_loss_scale": scaler.get_scale() if scaler else None})


# --- what every loop shares -----------------------------------------------------------------------

# --loop: peer.py's own loop (eager), the same loop with the model and its loss under torch.compile,
# and the trainers users run it with (bench/peers/: each module's run(job) trains `job`).
LOOPS = ("eager", "compile", "hf-trainer", "accelerate", "lightning")
TRAINER_MODULES = {"hf-trainer": "hf_trainer", "accelerate": "accelerate_loop",
                   "lightning": "lightning_loop"}


def micro_loss(model, inputs, targets, count):
    """(loss, logits) of a micro-batch: the summed cross-entropy over its tokens (GPT) or samples
    / `count`, the window's number of them (so that the window's gradients add up to the
    window's mean); the micro-batch's own mean where count is None (the trainers' loops, which
    divide by the number of micro-batches themselves: the same value, every micro-batch being the
    same size). A loop that keeps `logits` in a variable until the next micro-batch's forward, as
    `logits = model(inputs)` in a training loop does, holds them as that loop would."""
    logits = model(inputs)
    flat, targets = logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1)
    if count is None:
        return F.cross_entropy(flat, targets), logits
    return F.cross_entropy(flat, targets, reduction="sum") / count, logits


class LossOf(torch.nn.Module):
    """`model` with micro_loss as its forward: what --loop compile puts under torch.compile (the
    loss inside the compiled region, as a Hugging Face model's forward computes its loss)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, inputs, targets, count=None):  # -> the loss only (logits stay inside)
        return micro_loss(self.model, inputs, targets, count)[0]


def make_parser():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loop", default="eager", choices=LOOPS,
                        help="eager: this loop; compile: the same with the model and its loss "
                             "under torch.compile; hf-trainer, accelerate, lightning: those "
                             "libraries' accumulation (bench/peers/, CPU only)")
    parser.add_argument("--model", default="gpt", choices=["gpt", "mlp", "resnet", "hf"],
                        help="hf: the Hugging Face model directory --hf-model, as bigbatch's "
                             "model.kind = \"hf\" trains it (bench/peers/hf_models.py)")
    parser.add_argument("--hf-model", help="--model hf: the model directory (model.path)")
    parser.add_argument("--hf-context", type=int, default=0,
                        help="--model hf: tokens per sample (hf.context)")
    parser.add_argument("--lr", type=float, default=4e-3,
                        help="--model hf: AdamW's learning rate (optim.lr at the global batch)")
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp16"],
                        help="autocast dtype; fp16 (with a GradScaler) on CUDA only")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                        help="where the model and data live (cuda: the current GPU)")
    parser.add_argument("--data", default=FORTUNES,
                        help="the text corpus of the gpt and mlp jobs: a file or a directory")
    parser.add_argument("--gpt-context", type=int, default=64)
    parser.add_argument("--gpt-layers", type=int, default=4)
    parser.add_argument("--gpt-heads", type=int, default=4)
    parser.add_argument("--gpt-embed", type=int, default=128)
    parser.add_argument("--attention", default="auto", choices=["auto", "composite", "fused"],
                        help="the GPT's attention: composite = masked product, softmax, product "
                             "(bigbatch_torch's); fused = F.scaled_dot_product_attention; "
                             "auto = composite on the CPU, fused on CUDA")
    parser.add_argument("--max-seconds", type=float, default=0.0,
                        help="stop after the window in which this many seconds of timed "
                             "windows are reached (0 = run all --steps; eager and compile only)")
    parser.add_argument("--global-batch", type=int, default=64)
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=20, help="timed optimizer steps")
    parser.add_argument("--threads", type=int, default=0,
                        help="torch.set_num_threads; 0 = leave as the environment set it")
    parser.add_argument("--seed", type=int, default=1,
                        help="bigbatch's train.seed: the sample order, and the model's "
                             "initialisation unless --init-from")
    parser.add_argument("--init-from",
                        help="a safetensors file of the built-in model's state_dict (bigbatch's "
                             "model.init_from) to start from instead of a fresh initialisation")
    parser.add_argument("--save-initial",
                        help="write the model's initial weights here and train nothing: the "
                             "built-in models' state_dict as safetensors (for --init-from and "
                             "model.init_from), an hf model as a model directory (for "
                             "--hf-model and model.path; the tokenizer's files copied)")
    parser.add_argument("--no-memory", action="store_true", help="skip the profiled window")
    parser.add_argument("--out", default="-", help="JSON lines (default: stdout)")
    parser.add_argument("--gemm-peak", action="store_true",
                        help="print the fp32 and bf16 GEMM rates (JSON) and train nothing")
    return parser


def setup(args):
    """Everything before the first window, the same for every --loop and in this order (so the
    random draws are the same: the model's initialisation, then the sample order): the job, its
    optimizer and schedule, the window order, the JSON writer and the model FLOPs. Returns it all
    as a namespace."""
    refuse_unusable_cuda(args)
    if args.loop in TRAINER_MODULES:
        if args.device != "cpu":
            sys.exit(f"peer.py: --loop {args.loop} runs on the CPU only")
        if args.max_seconds > 0:
            sys.exit("peer.py: --max-seconds is for --loop eager and compile")
        if args.global_batch % args.micro_batch:
            sys.exit(f"peer.py: --loop {args.loop} needs --global-batch a multiple of "
                     f"--micro-batch (its accumulation steps are a count of micro-batches)")
    cuda = args.device == "cuda"
    device = torch.device(args.device)
    attention = args.attention if args.attention != "auto" else ("fused" if cuda else "composite")
    if attention == "fused":
        if args.model != "gpt":
            sys.exit("peer.py: --attention fused is for the gpt model (a causal mask)")
        bigbatch_torch.multi_head_attention = fused_causal_attention
    torch.manual_seed(args.seed)
    model, data, make_optimizer, max_grad_norm, token_loss = build_job(args.model, args)
    if args.init_from:
        load_initial(model, args)
    if cuda:  # initialised on the CPU, as there, then moved
        model.to(device)
        move_data(data, device)
    model.train()
    optimizer = make_optimizer(model)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_cosine(args.steps))
    params = [p for p in model.parameters() if p.requires_grad]
    # bigbatch's windows for train.seed = --seed, an epoch's last one short where the data set is
    # not a multiple of global_batch: the loop splits it as bigbatch does, the trainers refuse it
    # (peers.common.window_stream).
    windows = data_order.WindowSampler(data.size, args.global_batch, args.seed)
    out = sys.stdout if args.out == "-" else open(args.out, "w")

    def emit(record):
        out.write(json.dumps(record) + "\n")
        out.flush()

    flops = train_flops_per_sample(model, data.get(windows.order[:1].to(device))[0])
    flops *= getattr(data, "real_share", 1.0)
    per_sample = data.context if token_loss else 1  # what data.get counts
    return argparse.Namespace(
        args=args, cuda=cuda, device=device, attention=attention, model=model, data=data,
        optimizer=optimizer, scheduler=scheduler, params=params, max_grad_norm=max_grad_norm,
        token_loss=token_loss, windows=windows, emit=emit, flops=flops,
        window_count=args.global_batch * per_sample)


def window_record(job, step, loss, seconds):
    """The JSON record of a timed CPU window (samples and tokens of a full window)."""
    tokens = job.window_count if job.token_loss else 0
    return {"type": "window", "step": step, "loss": loss, "step_seconds": seconds,
            "samples_per_second": job.args.global_batch / seconds,
            "tokens_per_second": tokens / seconds}


class MemoryProfile:
    """Peak tensor memory of what runs between start() and stop(): the tensors alive at start()
    plus the highest running sum of the profiler's allocation events until stop()."""

    def __init__(self, job, not_counted=()):
        # bigbatch holds the text corpus (data::TextCorpus), the token ids of the hf models' data
        # (host_tensors) and the sample order (its window sampler) in std::vectors, outside its
        # tensor count: so they are left out here too. The images are tensors on both sides and
        # count on both.
        data = job.data
        text = ([data.data, data.val] if isinstance(data, (Sequences, Contexts))
                else list(getattr(data, "host_tensors", ())))
        self.not_counted = text + [job.windows.order, *not_counted]

    def start(self):
        gc.collect()
        self.baseline = live_tensor_bytes(self.not_counted)
        self.prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                           profile_memory=True)
        self.prof.__enter__()

    def stop(self):
        self.prof.__exit__(None, None, None)
        return window_peak_bytes(self.prof.profiler.kineto_results.events(), self.baseline)


def cpu_summary(job, peak_bytes, rss, **extra):
    """The summary line of a CPU run (and the loop's own fields, `extra`)."""
    return {"type": "summary", "peak_bytes": peak_bytes, "peak_rss_bytes": rss,
            "parameters": sum(p.numel() for p in job.params),
            "train_flops_per_sample": job.flops, "torch": torch.__version__,
            "threads": torch.get_num_threads(), "interop_threads": torch.get_num_interop_threads(),
            "openblas_core": openblas_core(),
            "env": {k: os.environ.get(k, "") for k in
                    ("OPENBLAS_CORETYPE", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")},
            "loop": job.args.loop, **extra}


def compile_report(seconds):
    """--loop compile's own summary fields: compile_seconds = the first window's time less the
    median of the later windows' (the first window compiles the forward and loss on its first
    micro-batch, the backward on its first backward), the first window's time, and Dynamo's own
    phase timings (torch._dynamo.utils.calculate_time_spent, a private API: {} where absent)."""
    try:
        phases = dict(torch._dynamo.utils.calculate_time_spent())
    except (AttributeError, TypeError):
        phases = {}
    later = sorted(seconds[1:])
    median = (later[(len(later) - 1) // 2] + later[len(later) // 2]) / 2 if later else None
    return {"compile_seconds": max(0.0, seconds[0] - median) if median is not None else None,
            "first_window_seconds": seconds[0] if seconds else None,
            "dynamo_time_spent_seconds": phases}


# --- the loop -------------------------------------------------------------------------------------

def run_loop(job):
    """--loop eager and compile: the loop of this file's docstring, timed window by window."""
    args, model, data, optimizer, scheduler = (job.args, job.model, job.data, job.optimizer,
                                               job.scheduler)
    cuda, device, params, max_grad_norm, emit = (job.cuda, job.device, job.params,
                                                 job.max_grad_norm, job.emit)
    if args.loop == "compile":  # torch.compile's default mode; the loss inside the compiled code
        compiled = torch.compile(LossOf(model))

        def loss_of(inputs, targets, count):  # -> (loss, None): the logits stay compiled code's
            return compiled(inputs, targets, count), None
    else:  # the eager loop: `logits` held until the next micro-batch's, as before
        def loss_of(inputs, targets, count):
            return micro_loss(model, inputs, targets, count)
    autocast_dtype = torch.float16 if args.precision == "fp16" else torch.bfloat16
    scaler = torch.amp.GradScaler("cuda") if args.precision == "fp16" else None

    def train_window():
        """One optimizer step over the next window (global_batch samples, fewer for an epoch's last
        one); returns (samples, tokens, loss)."""
        window = job.windows.next()
        if cuda:
            return train_window_cuda(window.to(device))
        micro = [data.get(window[i:i + args.micro_batch])
                 for i in range(0, window.numel(), args.micro_batch)]
        count = sum(m[2] for m in micro)  # tokens (GPT) or samples in the whole window
        total = 0.0
        for inputs, targets, _ in micro:
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16"):
                loss, logits = loss_of(inputs, targets, count)
            loss.backward()
            total += loss.item()
        if max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        return window.numel(), count if job.token_loss else 0, total

    def train_window_cuda(window):
        """train_window on the GPU: autocast on CUDA, fp16 through the GradScaler (one unscale,
        step and update per window), and the loss read once per window (loss.item() after
        every micro-batch would wait for the GPU each time)."""
        micro = [data.get(window[i:i + args.micro_batch])
                 for i in range(0, window.numel(), args.micro_batch)]
        count = sum(m[2] for m in micro)
        total = torch.zeros((), device=device)
        for inputs, targets, _ in micro:
            with torch.autocast("cuda", dtype=autocast_dtype, enabled=args.precision != "fp32"):
                loss, logits = loss_of(inputs, targets, count)
            (scaler.scale(loss) if scaler else loss).backward()
            total += loss.detach()
        if scaler:
            scaler.unscale_(optimizer)
        if max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
        if scaler:
            scaler.step(optimizer)  # skipped by the scaler when the window overflowed
            scaler.update()
        else:
            optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        return window.numel(), int(count) if job.token_loss else 0, total.item()

    if cuda:
        peak = timed_cuda_windows(args, train_window, emit)
        summarise_cuda(args, emit, params, job.flops, job.attention, scaler, peak)
        return
    started, seconds_each = time.perf_counter(), []
    for step in range(1, args.steps + 1):
        start = time.perf_counter()
        samples, tokens, loss = train_window()
        seconds = time.perf_counter() - start
        seconds_each.append(seconds)
        emit({"type": "window", "step": step, "loss": loss, "step_seconds": seconds,
              "samples_per_second": samples / seconds, "tokens_per_second": tokens / seconds})
        if args.max_seconds > 0 and time.perf_counter() - started >= args.max_seconds:
            break

    rss = peak_rss_bytes()  # before the profiler, whose event records take memory of their own
    peak_bytes = 0
    if not args.no_memory:  # one more window, profiled: not timed
        profile = MemoryProfile(job)
        profile.start()
        train_window()
        peak_bytes = profile.stop()
    extra = compile_report(seconds_each) if args.loop == "compile" else {}
    emit(cpu_summary(job, peak_bytes, rss, **extra))


def main():
    args = make_parser().parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    if args.gemm_peak:
        print(json.dumps(gemm_peak()))
        return
    if args.save_initial:
        torch.manual_seed(args.seed)
        save_initial(build_job(args.model, args)[0], args)
        return
    job = setup(args)
    if args.loop not in TRAINER_MODULES:
        run_loop(job)
        return
    # bench/peers/ imports this file as `peer`: the module that is running, not a second copy.
    sys.modules.setdefault("peer", sys.modules[__name__])
    import importlib
    importlib.import_module("peers." + TRAINER_MODULES[args.loop]).run(job)


if __name__ == "__main__":
    main()
