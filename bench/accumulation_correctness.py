#!/usr/bin/env python3
"""Does each popular trainer's gradient accumulation apply the full-batch gradient?

Trains a tiny random Llama (and a tiny Llama classifier) with plain SGD, lr 1, through each
peer used the way its own documentation shows, reads back the gradient every optimizer step
applied ((weights before - weights after) / lr, from torch's global optimizer step hooks) and
compares it with the gradient of one float64 forward/backward of the whole window at the same
weights. Cases (docs/PEER_CORRECTNESS.md):

  uneven       8 prompt/response records, 4 micro-batches of 2, right-padded, labels -100 over
               prompts and padding: 58, 23, 9 and 4 learned tokens per micro-batch. The window
               loss is the sum of token losses over the window / the window's learned tokens.
  short        10 records, global batch 8 = 4 x 2: the second window is 2 records in one
               micro-batch; reported for that window, whose gradient is theirs alone.
  clip         8 records, 26 learned tokens in every micro-batch (so a mean of micro-batch
               means is exact), max_grad_norm = 0.2 x the window gradient's norm: correct is one
               clip of the window gradient at the boundary.
  classification  10 sequences, per-sample mean cross-entropy, micro-batches of 4 + 4 + 2.

bigbatch takes part through its CLI (train, then export after every step) on the token cases.

Usage (the wheel's Python of scripts/setup, with bench/peer-requirements.txt installed):
    ~/.cache/bigbatch/torch-2.15.0/bin/python bench/accumulation_correctness.py \\
        [--out DIR] [--bigbatch build/bigbatch | --skip-bigbatch]

Prints a markdown table and writes DIR/results.json and DIR/table.md (default DIR:
runs/accumulation-correctness-<UTC time>). Exits 1 if any peer failed to import or run, or took
another number of optimizer steps than the case needs.
"""
import argparse
import copy
import dataclasses
import datetime
import functools
import json
import logging
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import warnings

import torch
import torch.nn.functional as F

from data_order import epoch_permutation

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOKENIZER_DIR = os.path.join(REPO, "tests", "hf", "tiny-llama")  # llama3-style byte-level BPE
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
# Letters that take part in no merge of that tokenizer: each one is exactly one token.
ALPHABET = "JKLNOQRUVXZjqxz"
LR = 1.0
TOLERANCE = 1e-5  # relative error that float32 rounding stays far below on these models
SEED = 0
CLIP_FRACTION = 0.2  # max_grad_norm as a share of the unclipped window gradient's norm
MODEL_SIZES = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=False)
CLASSES = 3


# ---------------------------------------------------------------------------------------------
# Cases and their data


@dataclasses.dataclass
class Case:
    """One accumulation scenario: samples in training order and how they are batched."""
    name: str
    task: str  # "lm" (token-weighted causal LM loss) or "cls" (per-sample mean)
    what: str
    samples: list  # dicts of tensors: input_ids (T,), labels (T,) for "lm", () for "cls"
    records: list  # the prompt/response texts of "lm" samples (what bigbatch reads)
    micro_batch: int
    accum_steps: int
    reported_window: int  # the window whose gradient the table shows
    clip_fraction: float = 0.0
    max_grad_norm: float = 0.0  # set from the reference once the initial weights exist

    @property
    def global_batch(self):
        """Samples per optimizer step."""
        return self.micro_batch * self.accum_steps

    @property
    def steps(self):
        """Optimizer steps over the samples (the last window may be short)."""
        return math.ceil(len(self.samples) / self.global_batch)

    def window(self, step):
        """Sample indices of window `step` in the fixed order every Python peer trains in."""
        return list(range(step * self.global_batch,
                          min((step + 1) * self.global_batch, len(self.samples))))


def random_letters(rng, count):
    """`count` letters of ALPHABET: `count` tokens."""
    return "".join(rng.choice(ALPHABET) for _ in range(count))


def make_records(rng, prompt_tokens, response_tokens):
    """Prompt/response records whose texts have exactly the given numbers of tokens."""
    return [{"prompt": random_letters(rng, p), "response": random_letters(rng, r)}
            for p, r in zip(prompt_tokens, response_tokens)]


def tokenize_record(tokenizer, record, eos_id):
    """A causal-LM sample as bigbatch builds one (docs/PRETRAINED.md, instruction tuning): the
    prompt's ids with the tokenizer's BOS, then the response's ids and EOS; labels (unshifted, as
    transformers takes them) are -100 over the prompt, so only response tokens are learned."""
    prompt = tokenizer.encode(record["prompt"]).ids
    response = tokenizer.encode(record["response"], add_special_tokens=False).ids + [eos_id]
    expected = (1 + len(record["prompt"]), len(record["response"]) + 1)
    if (len(prompt), len(response)) != expected:
        raise RuntimeError(f"tokenizer gave {len(prompt)} + {len(response)} tokens for "
                           f"{record}, expected {expected[0]} + {expected[1]}")
    ids = torch.tensor(prompt + response)
    labels = ids.clone()
    labels[:len(prompt)] = -100
    return {"input_ids": ids, "labels": labels}


def lm_case(tokenizer, eos_id, rng, name, what, prompt_tokens, response_tokens, **kw):
    """A token-weighted case over generated prompt/response records."""
    records = make_records(rng, prompt_tokens, response_tokens)
    samples = [tokenize_record(tokenizer, r, eos_id) for r in records]
    return Case(name=name, task="lm", what=what, samples=samples, records=records, **kw)


def classification_case(rng, vocab_size):
    """10 unpadded sequences of 12 tokens (ids from 3 up: 0 is the pad id) with 3 classes."""
    samples = [{"input_ids": torch.tensor([rng.randrange(3, vocab_size) for _ in range(12)]),
                "labels": torch.tensor(rng.randrange(CLASSES))} for _ in range(10)]
    return Case(name="classification", task="cls",
                what="10 sequences, per-sample mean cross-entropy, micro-batches 4 + 4 + 2",
                samples=samples, records=[], micro_batch=4, accum_steps=3, reported_window=0)


def make_cases(tokenizer, eos_id, vocab_size):
    """The four cases, generated from SEED."""
    rng = random.Random(SEED)
    uneven_prompts, uneven_responses = [3, 5, 2, 4, 6, 2, 3, 5], [30, 26, 12, 9, 4, 3, 1, 1]
    return [
        lm_case(tokenizer, eos_id, rng, "uneven",
                "8 records as 4 x 2, padded; 58, 23, 9, 4 learned tokens per micro-batch",
                uneven_prompts, uneven_responses, micro_batch=2, accum_steps=4,
                reported_window=0),
        lm_case(tokenizer, eos_id, rng, "short",
                "10 records, global batch 8 = 4 x 2: window 2 is 2 records in 1 micro-batch",
                uneven_prompts + [4, 3], uneven_responses + [7, 5], micro_batch=2,
                accum_steps=4, reported_window=1),
        lm_case(tokenizer, eos_id, rng, "clip",
                "8 records as 4 x 2, 26 learned tokens per micro-batch, max_grad_norm = 0.2 x "
                "the window gradient's norm",
                [3, 5, 2, 4, 6, 2, 3, 5], [20, 4, 12, 12, 6, 18, 10, 14], micro_batch=2,
                accum_steps=4, reported_window=0, clip_fraction=CLIP_FRACTION),
        classification_case(rng, vocab_size),
    ]


def collate(samples, pad_id=0):
    """Right-pads a micro-batch: input_ids with pad_id, labels with -100, an attention mask."""
    length = max(len(s["input_ids"]) for s in samples)
    ids = torch.full((len(samples), length), pad_id, dtype=torch.long)
    mask = torch.zeros((len(samples), length), dtype=torch.long)
    for row, s in enumerate(samples):
        ids[row, :len(s["input_ids"])] = s["input_ids"]
        mask[row, :len(s["input_ids"])] = 1
    if samples[0]["labels"].dim() == 0:
        labels = torch.stack([s["labels"] for s in samples])
    else:
        labels = torch.full((len(samples), length), -100, dtype=torch.long)
        for row, s in enumerate(samples):
            labels[row, :len(s["labels"])] = s["labels"]
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def loader(case):
    """The fixed-order DataLoader of micro-batches every hand-written loop iterates."""
    return torch.utils.data.DataLoader(case.samples, batch_size=case.micro_batch, shuffle=False,
                                       collate_fn=collate)


def window_batches(case):
    """The micro-batches of every window, in order."""
    batches = list(loader(case))
    return [batches[i:i + case.accum_steps] for i in range(0, len(batches), case.accum_steps)]


def loss_sum(task, logits, labels):
    """Sum of the cross-entropies of every target: next tokens that are not -100 for "lm"
    (transformers' shift: logits at t predict labels at t + 1), every sample for "cls"."""
    if task == "lm":
        logits, labels = logits[:, :-1], labels[:, 1:]
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                           ignore_index=-100, reduction="sum")


def count(task, labels):
    """The targets loss_sum sums over."""
    return int(labels[:, 1:].ne(-100).sum()) if task == "lm" else labels.numel()


def inputs_of(batch):
    """A batch without its labels (for losses computed outside the model)."""
    return {k: v for k, v in batch.items() if k != "labels"}


# ---------------------------------------------------------------------------------------------
# Models


def make_models(model_dir):
    """The seeded random causal LM (saved to model_dir with the fixture's tokenizer, for
    bigbatch) and classifier, in float32. Llama has no dropout: train and eval mode agree."""
    import transformers
    vocab = json.load(open(os.path.join(TOKENIZER_DIR, "config.json")))["vocab_size"]
    torch.manual_seed(SEED)
    lm = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        **MODEL_SIZES, vocab_size=vocab, bos_token_id=1, eos_token_id=2))
    lm.save_pretrained(model_dir)
    for name in TOKENIZER_FILES:
        shutil.copy(os.path.join(TOKENIZER_DIR, name), model_dir)
    torch.manual_seed(SEED + 1)
    cls = transformers.LlamaForSequenceClassification(transformers.LlamaConfig(
        **MODEL_SIZES, vocab_size=vocab, num_labels=CLASSES, pad_token_id=0))
    return lm, cls


def with_weights(template, weights, dtype):
    """A copy of `template` in `dtype` holding `weights` (name -> tensor)."""
    model = copy.deepcopy(template).to(dtype)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(weights[name])
    return model


def weights_of(named):
    """Name -> a float32 copy of each parameter of `named` ((name, parameter) pairs)."""
    return {n: p.detach().float().clone() for n, p in named}


# ---------------------------------------------------------------------------------------------
# The reference and the comparison


def reference_gradient(case, template, weights, indices):
    """The window's exact gradient in float64: one forward/backward of all its samples with the
    window loss (sum over its targets / their number), clipped at case.max_grad_norm if set."""
    model = with_weights(template, weights, torch.float64)
    batch = collate([case.samples[i] for i in indices])
    logits = model(**inputs_of(batch)).logits
    loss = loss_sum(case.task, logits, batch["labels"]) / count(case.task, batch["labels"])
    loss.backward()
    grad = torch.cat([p.grad.reshape(-1) for _, p in model.named_parameters()])
    if case.max_grad_norm > 0:
        grad = grad * min(1.0, case.max_grad_norm / grad.norm().item())
    return grad


def flat(grads, template):
    """The gradient dict flattened in the template's parameter order, as float64."""
    return torch.cat([grads[n].reshape(-1).double() for n, _ in template.named_parameters()])


def compare(grad, ref):
    """Relative error, norm ratio, cosine and the least-squares scale of grad against ref."""
    ref_norm = ref.norm().item()
    dot = torch.dot(grad, ref).item()
    return {"rel_error": (grad - ref).norm().item() / ref_norm,
            "norm_ratio": grad.norm().item() / ref_norm,
            "cosine": dot / (grad.norm().item() * ref_norm),
            "scale": dot / ref_norm ** 2}


def verdict(metrics):
    """'exact' within TOLERANCE, else by how much the applied gradient misses."""
    if metrics["rel_error"] < TOLERANCE:
        return "exact"
    return f"misses by {100 * metrics['rel_error']:.1f}%"


# ---------------------------------------------------------------------------------------------
# Reading back what an optimizer step applied


@dataclasses.dataclass
class Step:
    """One optimizer step: the weights it started from and the gradient it applied."""
    before: dict
    grad: dict
    hyper: dict
    window: list = None  # sample indices; None: the sequential window of its step number


class StepRecorder:
    """Context manager: records every torch.optim.SGD step of `model` through torch's global
    optimizer step hooks (torch.optim.optimizer.register_optimizer_step_pre_hook / _post_hook),
    so no peer's own code is touched. Wrappers (accelerate's AcceleratedOptimizer, Lightning's
    LightningOptimizer) are skipped: the SGD they call is recorded."""

    def __init__(self, model):
        self.params = dict(model.named_parameters())
        self.steps = []
        self._pending = None
        self._handles = []

    def __enter__(self):
        from torch.optim.optimizer import (register_optimizer_step_post_hook,
                                           register_optimizer_step_pre_hook)
        self._handles = [register_optimizer_step_pre_hook(self._before),
                         register_optimizer_step_post_hook(self._after)]
        return self

    def __exit__(self, *exc):
        for handle in self._handles:
            handle.remove()

    def _before(self, optimizer, args, kwargs):
        """Snapshots the weights and the hyperparameters the step is about to use."""
        if type(optimizer) is not torch.optim.SGD:
            return
        groups = optimizer.param_groups
        hyper = {k: sorted({g[k] for g in groups}) for k in ("lr", "momentum", "weight_decay")}
        if len(hyper["lr"]) != 1:
            raise RuntimeError(f"parameter groups with different learning rates: {hyper['lr']}")
        self._pending = (weights_of(self.params.items()), hyper)

    def _after(self, optimizer, args, kwargs):
        """Records (weights before - weights after) / lr."""
        if type(optimizer) is not torch.optim.SGD:
            return
        before, hyper = self._pending
        lr = hyper["lr"][0]
        grad = {n: (before[n] - p.detach().float()) / lr for n, p in self.params.items()}
        self.steps.append(Step(before=before, grad=grad, hyper=hyper))


def sgd(model):
    """Plain SGD at LR: no momentum, no weight decay."""
    return torch.optim.SGD(model.parameters(), lr=LR, momentum=0.0, weight_decay=0.0)


# ---------------------------------------------------------------------------------------------
# Peers (each trains `model` over the case for case.steps optimizer steps)


def pytorch_common(case, model, clip_every_backward=False):
    """The loop as commonly written (the PyTorch loop the Accelerate gradient accumulation guide
    starts from, https://huggingface.co/docs/accelerate/usage_guides/gradient_accumulation):
    each micro-batch's mean loss / accum_steps, backward, step every accum_steps. The guide's
    `(index + 1) % accum_steps == 0` alone never steps on a short last window; the usual
    `or index + 1 == len(loader)` is added so that it does. clip_grad_norm_ before the step, or
    with clip_every_backward after every backward (the misplacement the clip case shows)."""
    optimizer = sgd(model)
    batches = loader(case)
    for index, batch in enumerate(batches):
        loss = model(**batch).loss / case.accum_steps
        loss.backward()
        if clip_every_backward and case.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), case.max_grad_norm)
        if (index + 1) % case.accum_steps == 0 or index + 1 == len(batches):
            if case.max_grad_norm > 0 and not clip_every_backward:
                torch.nn.utils.clip_grad_norm_(model.parameters(), case.max_grad_norm)
            optimizer.step()
            optimizer.zero_grad()


def pytorch_clip_every_backward(case, model):
    """The common loop with clip_grad_norm_ after every backward instead of once per window."""
    pytorch_common(case, model, clip_every_backward=True)


def pytorch_window_normalised(case, model):
    """The loop done right: each micro-batch's summed loss / the window's target count (learned
    tokens for "lm", samples for "cls"), one clip_grad_norm_ and one step per window."""
    optimizer = sgd(model)
    for batches in window_batches(case):
        total = sum(count(case.task, b["labels"]) for b in batches)
        for batch in batches:
            logits = model(**inputs_of(batch)).logits
            (loss_sum(case.task, logits, batch["labels"]) / total).backward()
        if case.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), case.max_grad_norm)
        optimizer.step()
        optimizer.zero_grad()


def hf_arguments(case, output_dir):
    """transformers.TrainingArguments for the case: gradient_accumulation_steps,
    per_device_train_batch_size, max_grad_norm (0 = off; its default 1.0 would clip in every
    case), SGD (optim="sgd") at a constant LR, sequential sampling, nothing logged or saved."""
    import transformers
    return transformers.TrainingArguments(
        output_dir=output_dir, per_device_train_batch_size=case.micro_batch,
        gradient_accumulation_steps=case.accum_steps, max_grad_norm=case.max_grad_norm,
        max_steps=case.steps, learning_rate=LR, optim="sgd", weight_decay=0.0,
        lr_scheduler_type="constant", warmup_steps=0, use_cpu=True, seed=SEED,
        train_sampling_strategy="sequential", dataloader_drop_last=False, report_to="none",
        logging_strategy="no", save_strategy="no", disable_tqdm=True)


def hf_train(case, model, trainer_class=None, **trainer_kwargs):
    """Runs a transformers Trainer (or subclass) over the case's samples."""
    import transformers
    trainer_class = trainer_class or transformers.Trainer
    with tempfile.TemporaryDirectory() as output_dir:
        trainer = trainer_class(model=model, args=hf_arguments(case, output_dir),
                                train_dataset=case.samples, data_collator=collate,
                                **trainer_kwargs)
        trainer.remove_callback(transformers.trainer_callback.PrinterCallback)  # its summary
        trainer.train()


def hf_trainer(case, model):
    """Trainer as documented: the model computes its own loss; the Trainer counts the window's
    targets (num_items_in_batch, over labels[..., 1:] for a causal LM) and passes them to it."""
    hf_train(case, model)


def hf_trainer_compute_loss(case, model):
    """Trainer subclass overriding compute_loss as the Trainer guide's "Customize" example does
    (https://huggingface.co/docs/transformers/trainer#customize): a mean cross-entropy over the
    micro-batch, num_items_in_batch accepted but unused."""
    import transformers

    class MeanLossTrainer(transformers.Trainer):
        """The guide's CustomTrainer, its weighted loss replaced by the plain mean."""

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            labels = inputs.pop("labels")
            outputs = model(**inputs)
            loss = loss_sum(case.task, outputs.logits, labels) / count(case.task, labels)
            return (loss, outputs) if return_outputs else loss

    hf_train(case, model, trainer_class=MeanLossTrainer)


def hf_trainer_compute_loss_func(case, model):
    """Trainer(compute_loss_func=...), the hook its docstring gives custom losses: called with
    the outputs, the labels and num_items_in_batch, "the number of items in the entire
    accumulated batch"; here the summed loss / num_items_in_batch."""
    def window_loss(outputs, labels, num_items_in_batch):
        """The micro-batch's summed loss over the window's target count."""
        return loss_sum(case.task, outputs.logits, labels) / num_items_in_batch

    hf_train(case, model, compute_loss_func=window_loss)


def fresh_accelerator(case):
    """An Accelerator(cpu=True, gradient_accumulation_steps=...). Accelerate keeps its state in
    process-wide singletons; they are reset first so that earlier peers (the Trainer runs on
    Accelerate) leave nothing behind (the reset accelerate's own tests use)."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, GradientState
    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()
    return Accelerator(cpu=True, gradient_accumulation_steps=case.accum_steps)


def accelerate_accumulate(case, model):
    """The Accelerate gradient accumulation guide's finished code
    (https://huggingface.co/docs/accelerate/usage_guides/gradient_accumulation): with
    accelerator.accumulate(model), accelerator.backward(loss) of the micro-batch's loss, and
    accelerator.clip_grad_norm_ when accelerator.sync_gradients, then optimizer.step() and
    optimizer.zero_grad() on every micro-batch (the prepared optimizer steps only when gradients
    sync: every accum_steps micro-batches and at the end of the data)."""
    accelerator = fresh_accelerator(case)
    model, optimizer, batches = accelerator.prepare(model, sgd(model), loader(case))
    for batch in batches:
        with accelerator.accumulate(model):
            loss = model(**batch).loss
            accelerator.backward(loss)
            if accelerator.sync_gradients and case.max_grad_norm > 0:
                accelerator.clip_grad_norm_(model.parameters(), case.max_grad_norm)
            optimizer.step()
            optimizer.zero_grad()


def accelerate_num_items(case, model):
    """The same guide's "Gradient accumulation on training samples of variable size" skeleton:
    load the window's micro-batches first, count its targets (labels[..., 1:] != -100 for a
    transformers causal LM, as the guide says), backward each summed loss x
    gradient_accumulation_steps x num_processes / num_items_in_batch, then clip and step."""
    accelerator = fresh_accelerator(case)
    model, optimizer, batches = accelerator.prepare(model, sgd(model), loader(case))
    iterator = iter(batches)
    remainder = len(batches) % case.accum_steps or case.accum_steps
    updates = math.ceil(len(batches) / case.accum_steps)
    for update in range(updates):
        in_step = case.accum_steps if update != updates - 1 else remainder
        batch_samples = [next(iterator) for _ in range(in_step)]
        local = torch.tensor(sum(count(case.task, b["labels"]) for b in batch_samples))
        num_items_in_batch = accelerator.gather(local).sum().item()
        for batch in batch_samples:
            logits = model(**inputs_of(batch)).logits
            loss = loss_sum(case.task, logits, batch["labels"])
            loss = loss * case.accum_steps * accelerator.num_processes / num_items_in_batch
            accelerator.backward(loss)
        if case.max_grad_norm > 0:
            accelerator.clip_grad_norm_(model.parameters(), case.max_grad_norm)
        optimizer.step()
        optimizer.zero_grad()


def lightning_trainer(case, model):
    """Lightning's Trainer(accumulate_grad_batches=..., gradient_clip_val=...,
    gradient_clip_algorithm="norm"), as in "Effective Training Techniques" (Accumulate Gradients,
    Gradient Clipping: https://lightning.ai/docs/pytorch/stable/advanced/training_tricks.html);
    training_step returns the micro-batch's loss, configure_optimizers the SGD."""
    import lightning.pytorch as pl

    class Module(pl.LightningModule):
        """The model, its loss as training_step's result, plain SGD."""

        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def training_step(self, batch, batch_idx):
            return self.inner(**batch).loss

        def configure_optimizers(self):
            return sgd(self.inner)

    trainer = pl.Trainer(
        accumulate_grad_batches=case.accum_steps,
        gradient_clip_val=case.max_grad_norm if case.max_grad_norm > 0 else None,
        gradient_clip_algorithm="norm", accelerator="cpu", devices=1, max_steps=case.steps,
        logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False)
    trainer.fit(Module(model), train_dataloaders=loader(case))


def in_process(run):
    """Wraps a peer that trains in this process: returns the steps it took."""
    @functools.wraps(run)
    def peer(case, model, context):
        with StepRecorder(model) as recorder:
            run(case, model)
        return recorder.steps
    return peer


# ---------------------------------------------------------------------------------------------
# bigbatch, through its CLI


def bigbatch_settings(case, context, data_path, run_dir, steps):
    """bigbatch train's -s settings for the case (keys as `bigbatch config` lists them)."""
    settings = {
        "model.kind": "hf", "model.path": context["model_dir"], "data.path": data_path,
        "data.val_fraction": 0, "hf.context": 48, "batch.global_batch": case.global_batch,
        "batch.micro_batch": case.micro_batch, "optim.name": "sgd", "optim.lr": LR,
        "optim.lr_scaling": "none", "optim.base_batch": case.global_batch,
        "optim.momentum": 0, "optim.weight_decay": 0, "optim.max_grad_norm": case.max_grad_norm,
        "schedule.kind": "constant", "schedule.warmup_steps": 0, "train.steps": steps,
        "train.seed": context["bigbatch_seed"], "train.eval_every": 0, "train.threads": 1,
        "sample.bytes": 0, "train.run_dir": run_dir}
    return [arg for key, value in settings.items() for arg in ("-s", f"{key}={value}")]


def run_bigbatch(binary, args):
    """Runs the bigbatch CLI; raises with its output if it fails."""
    done = subprocess.run([binary, *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{binary} {' '.join(args)} exited {done.returncode}:\n"
                           f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")


def bigbatch_weights_after(case, context, data_path, steps, work):
    """bigbatch's weights after `steps` optimizer steps: a fresh run, then `bigbatch export`."""
    from safetensors.torch import load_file
    run_dir = os.path.join(work, f"run-{steps}")
    export_dir = os.path.join(work, f"export-{steps}")
    run_bigbatch(context["bigbatch"],
                 ["train", *bigbatch_settings(case, context, data_path, run_dir, steps)])
    run_bigbatch(context["bigbatch"], ["export", run_dir, "--out", export_dir])
    return {n: t.float() for n, t in load_file(os.path.join(export_dir,
                                                            "model.safetensors")).items()}


def bigbatch_peer(case, model, context):
    """bigbatch train on the case's records as JSONL (prompt/response, data.val_fraction = 0)
    with SGD at a constant lr, global batch and micro-batch as the case, optim.max_grad_norm;
    the weights after each step come from a run of that many steps and `bigbatch export`. Its
    windows follow its own seeded order (epoch_permutation), reproduced here."""
    work = os.path.join(context["out"], "bigbatch", case.name)
    os.makedirs(work, exist_ok=True)
    data_path = os.path.join(work, "records.jsonl")
    with open(data_path, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in case.records)
    names = [n for n, _ in model.named_parameters()]
    weights = [weights_of(model.named_parameters())]
    for steps in range(1, case.steps + 1):
        exported = bigbatch_weights_after(case, context, data_path, steps, work)
        missing = [n for n in names if n not in exported]
        if missing:
            raise RuntimeError(f"bigbatch export lacks {missing[:3]} ...")
        weights.append({n: exported[n] for n in names})
    order = epoch_permutation(len(case.samples), context["bigbatch_seed"], 0)
    return [Step(before=weights[k], grad={n: (weights[k][n] - weights[k + 1][n]) / LR
                                          for n in names},
                 hyper={"set": "optim.name=sgd optim.lr=1 optim.momentum=0 "
                                "optim.weight_decay=0 schedule.kind=constant"},
                 window=sorted(order[k * case.global_batch:(k + 1) * case.global_batch]))
            for k in range(case.steps)]


# ---------------------------------------------------------------------------------------------
# Running everything


PEERS = [
    ("PyTorch loop, mean loss / accum_steps", in_process(pytorch_common), "all"),
    ("PyTorch loop, clip after every backward", in_process(pytorch_clip_every_backward),
     "clip"),
    ("PyTorch loop, summed loss / window targets", in_process(pytorch_window_normalised),
     "all"),
    ("HF Trainer, model's loss", in_process(hf_trainer), "all"),
    ("HF Trainer, compute_loss override (mean)", in_process(hf_trainer_compute_loss), "all"),
    ("HF Trainer, compute_loss_func (sum / num_items_in_batch)",
     in_process(hf_trainer_compute_loss_func), "all"),
    ("Accelerate, accumulate()", in_process(accelerate_accumulate), "all"),
    ("Accelerate, num_items_in_batch recipe", in_process(accelerate_num_items), "all"),
    ("Lightning, accumulate_grad_batches", in_process(lightning_trainer), "all"),
    ("bigbatch", bigbatch_peer, "lm"),
]


# Why bigbatch has no classification row: it trains classifiers only as BERT.
BIGBATCH_CLASSIFICATION = ("bigbatch: no classification row (it trains classifiers only as BERT, "
                           "docs/PRETRAINED.md; tests/engine/accumulator_test.cpp "
                           "UnevenMicroBatches100As32x3Plus4 covers uneven sample-mean windows)")


def applies(scope, case):
    """Whether a peer of `scope` ("all", "lm" or a case name) runs on `case`."""
    return scope == "all" or scope == case.name or (scope == "lm" and case.task == "lm")


def set_clip_thresholds(cases, templates):
    """max_grad_norm of each clipping case: its fraction of the first window's unclipped norm."""
    for i, case in enumerate(cases):
        if case.clip_fraction > 0:
            template = templates[case.task]
            norm = reference_gradient(case, template, weights_of(template.named_parameters()),
                                      case.window(0)).norm().item()
            cases[i] = dataclasses.replace(case, max_grad_norm=case.clip_fraction * norm)


def measure(case, peer, template, context):
    """Runs one peer on one case; returns the comparison of every window it stepped on."""
    steps = peer(case, copy.deepcopy(template), context)
    if len(steps) != case.steps:
        raise RuntimeError(f"took {len(steps)} optimizer steps, the case needs {case.steps}")
    windows = []
    for k, step in enumerate(steps):
        indices = step.window if step.window is not None else case.window(k)
        ref = reference_gradient(case, template, step.before, indices)
        windows.append({"window": k, "samples": indices, "hyper": step.hyper,
                        **compare(flat(step.grad, template), ref)})
    return windows


def run_all(cases, templates, context, skip):
    """Every peer on every case it applies to; failures are printed and recorded."""
    rows, failures = [], []
    for case in cases:
        for name, peer, scope in PEERS:
            if not applies(scope, case) or name in skip:
                continue
            started = time.time()
            try:
                windows = measure(case, peer, templates[case.task], context)
            except Exception as error:  # reported below, and the exit code says so
                traceback.print_exc()
                failures.append({"case": case.name, "peer": name, "error": repr(error)})
                print(f"FAILED {case.name} / {name}: {error!r}", flush=True)
                continue
            shown = windows[case.reported_window]
            rows.append({"case": case.name, "peer": name, "windows": windows,
                         "seconds": round(time.time() - started, 2), **{
                             k: shown[k] for k in ("rel_error", "norm_ratio", "cosine", "scale")},
                         "verdict": verdict(shown)})
            print(f"{case.name:15s} {name:58s} {rows[-1]['verdict']}", flush=True)
    return rows, failures


def markdown_table(rows, cases):
    """The results as a markdown table, one row per case and peer."""
    shown = {c.name: c.reported_window + 1 for c in cases}
    lines = ["| case | peer | window | rel. error | norm ratio | cosine | scale | verdict |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['case']} | {r['peer']} | {shown[r['case']]} | {r['rel_error']:.2e} | "
                     f"{r['norm_ratio']:.4f} | {r['cosine']:.6f} | {r['scale']:.4f} | "
                     f"{r['verdict']} |")
    return "\n".join(lines) + "\n"


def describe_case(case):
    """What results.json says about a case: its batching and learned targets per micro-batch."""
    targets = [[count(case.task, b["labels"]) for b in batches]
               for batches in window_batches(case)]
    return {"name": case.name, "what": case.what, "samples": len(case.samples),
            "micro_batch": case.micro_batch, "accum_steps": case.accum_steps,
            "global_batch": case.global_batch, "steps": case.steps,
            "reported_window": case.reported_window + 1, "max_grad_norm": case.max_grad_norm,
            "targets_per_micro_batch": targets, "records": case.records}


def versions(bigbatch):
    """Versions of everything measured; bigbatch's from `--version` and the checkout's commit."""
    import accelerate
    import lightning
    import transformers
    found = {"python": sys.version.split()[0], "torch": torch.__version__,
             "transformers": transformers.__version__, "accelerate": accelerate.__version__,
             "lightning": lightning.__version__}
    if bigbatch and os.access(bigbatch, os.X_OK):
        commit = subprocess.run(["git", "-C", REPO, "describe", "--always", "--dirty"],
                                capture_output=True, text=True).stdout.strip()
        release = subprocess.run([bigbatch, "--version"], capture_output=True,
                                 text=True).stdout.strip()
        found["bigbatch"] = f"{release.removeprefix('bigbatch ')} ({commit or 'no checkout'})"
    return found


def parse_args():
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="output directory (default "
                        "runs/accumulation-correctness-<UTC time>)")
    parser.add_argument("--bigbatch", default=os.path.join(REPO, "build", "bigbatch"),
                        help="the bigbatch binary (default build/bigbatch)")
    parser.add_argument("--skip-bigbatch", action="store_true",
                        help="leave bigbatch out (recorded in results.json)")
    return parser.parse_args()


def quiet_peers():
    """Peers' start-up banners and advice off; errors still surface as exceptions."""
    import lightning.pytorch  # noqa: F401 (sets its loggers' levels on import)
    import transformers
    transformers.logging.set_verbosity_error()
    for name in ("lightning.pytorch", "lightning.fabric", "accelerate"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module="lightning")


def bigbatch_binary(args):
    """The bigbatch binary to run, or None with --skip-bigbatch; a missing one is said here and
    fails bigbatch's rows (the exit code says so)."""
    if args.skip_bigbatch:
        print("bigbatch left out (--skip-bigbatch)")
        return None
    if not os.access(args.bigbatch, os.X_OK):
        print(f"bigbatch: {args.bigbatch} is not an executable (build it, pass --bigbatch, or "
              "--skip-bigbatch)", file=sys.stderr)
    return args.bigbatch


def write_results(out, info, table):
    """DIR/results.json and DIR/table.md."""
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(info, f, indent=1)
    with open(os.path.join(out, "table.md"), "w") as f:
        f.write(table)


def main():
    """Builds the models and cases, runs every peer, writes and prints the results."""
    args = parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    now = datetime.datetime.now(datetime.timezone.utc)
    out = args.out or os.path.join(REPO, "runs",
                                   "accumulation-correctness-" + now.strftime("%Y%m%d-%H%M%S"))
    os.makedirs(out, exist_ok=True)
    from tokenizers import Tokenizer
    quiet_peers()
    tokenizer = Tokenizer.from_file(os.path.join(TOKENIZER_DIR, "tokenizer.json"))
    model_dir = os.path.join(out, "model")
    lm, cls = make_models(model_dir)
    templates = {"lm": lm, "cls": cls}
    cases = make_cases(tokenizer, tokenizer.token_to_id("<|eot_id|>"), lm.config.vocab_size)
    set_clip_thresholds(cases, templates)
    bigbatch = bigbatch_binary(args)
    if bigbatch:
        print(BIGBATCH_CLASSIFICATION)
    context = {"out": out, "model_dir": model_dir, "bigbatch": bigbatch, "bigbatch_seed": SEED}
    started = time.time()
    rows, failures = run_all(cases, templates, context, skip=set() if bigbatch else {"bigbatch"})
    table = markdown_table(rows, cases)
    info = {"date": now.strftime("%Y-%m-%d %H:%M UTC"), "command": " ".join(sys.argv),
            "versions": versions(bigbatch), "tolerance": TOLERANCE, "lr": LR, "seed": SEED,
            "seconds": round(time.time() - started, 1),
            "cases": [describe_case(c) for c in cases],
            "peers": [{"name": n, "usage": p.__doc__, "cases": s} for n, p, s in PEERS],
            "bigbatch_left_out": bigbatch is None, "rows": rows, "failures": failures}
    write_results(out, info, table)
    print()
    print(" ".join(f"{k} {v}" for k, v in info["versions"].items()))
    print(table)
    print(f"wrote {out}/results.json and table.md ({info['seconds']} s)")
    if failures:
        print(f"{len(failures)} peer run(s) failed: " +
              "; ".join(f"{f['case']} / {f['peer']}" for f in failures), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
