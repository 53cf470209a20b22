#!/usr/bin/env python3
"""Golden values from real Python PyTorch for bigbatch's accumulation tests.

Runs the standard PyTorch gradient-accumulation loop (equal micro-batches, loss / accum_steps,
clip_grad_norm_ at the window boundary, AdamW, LambdaLR warmup+cosine) on the byte-level MLP that
bigbatch::models::Mlp mirrors (same module names), in float64, and writes initial weights, data,
the first window gradient and the weights after the first and the last optimizer step to golden_mlp_adamw.json.

Run with the Python of the PyTorch wheel bigbatch builds against (scripts/setup installs it;
docs/LIBTORCH.md says how far Debian's 1.13 differs):
    ~/.cache/bigbatch/torch-2.15.0/bin/python tests/golden/make_golden.py
"""
import json
import math
import os

import torch
import torch.nn.functional as F

CONTEXT, EMBED, HIDDEN, LAYERS, VOCAB = 4, 6, 16, 2, 256
GLOBAL_BATCH, MICRO_BATCH, STEPS = 16, 4, 5
LR, WEIGHT_DECAY, BETAS, EPS, MAX_NORM = 3e-3, 0.1, (0.9, 0.99), 1e-8, 0.05
WARMUP, MIN_RATIO = 2, 0.1


class Mlp(torch.nn.Module):
    """The module layout of bigbatch::models::Mlp."""

    def __init__(self):
        super().__init__()
        self.tok_embed = torch.nn.Embedding(VOCAB, EMBED)
        widths = [CONTEXT * EMBED] + [HIDDEN] * LAYERS
        self.hidden = torch.nn.ModuleList(
            torch.nn.Linear(widths[i], widths[i + 1]) for i in range(LAYERS))
        self.head = torch.nn.Linear(HIDDEN, VOCAB)

    def forward(self, inputs):  # (B, CONTEXT) -> (B, VOCAB)
        x = self.tok_embed(inputs).reshape(inputs.shape[0], -1)
        for layer in self.hidden:
            x = torch.tanh(layer(x))
        return self.head(x)


def warmup_cosine(step):
    """bigbatch::engine::LrSchedule (warmup_cosine) as a LambdaLR factor."""
    if step < WARMUP:
        return (step + 1) / WARMUP
    progress = min(1.0, (step - WARMUP) / max(1, STEPS - WARMUP))
    return MIN_RATIO + (1 - MIN_RATIO) * 0.5 * (1 + math.cos(math.pi * progress))


def tensors(module):
    return {name: p.detach().flatten().tolist() for name, p in module.named_parameters()}


def main():
    torch.manual_seed(1234)
    model = Mlp().double()
    initial = tensors(model)
    inputs = torch.randint(0, VOCAB, (STEPS, GLOBAL_BATCH, CONTEXT))
    targets = torch.randint(0, VOCAB, (STEPS, GLOBAL_BATCH))

    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": WEIGHT_DECAY}, {"params": no_decay, "weight_decay": 0.0}],
        lr=LR, betas=BETAS, eps=EPS, foreach=False)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_cosine)
    accum_steps = GLOBAL_BATCH // MICRO_BATCH

    first_window_grad, lrs, losses, grad_norms, after_step = None, [], [], [], []
    for step in range(STEPS):
        window_loss = 0.0
        for micro in range(accum_steps):
            rows = slice(micro * MICRO_BATCH, (micro + 1) * MICRO_BATCH)
            loss = F.cross_entropy(model(inputs[step, rows]), targets[step, rows])
            (loss / accum_steps).backward()
            window_loss += loss.item() / accum_steps
        if step == 0:
            first_window_grad = {n: p.grad.flatten().tolist() for n, p in model.named_parameters()}
        grad_norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)))
        lrs.append(optimizer.param_groups[0]["lr"])
        losses.append(window_loss)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        after_step.append(tensors(model))

    golden = {
        "generator": "tests/golden/make_golden.py, torch " + torch.__version__,
        "options": {"context": CONTEXT, "embed": EMBED, "hidden": HIDDEN, "layers": LAYERS,
                    "global_batch": GLOBAL_BATCH, "micro_batch": MICRO_BATCH, "steps": STEPS,
                    "lr": LR, "weight_decay": WEIGHT_DECAY, "beta1": BETAS[0], "beta2": BETAS[1],
                    "eps": EPS, "max_grad_norm": MAX_NORM, "warmup_steps": WARMUP,
                    "min_lr_ratio": MIN_RATIO},
        "inputs": inputs.tolist(),
        "targets": targets.tolist(),
        "initial": initial,
        "first_window_grad": first_window_grad,
        "grad_norms": grad_norms,
        "lrs": lrs,
        "losses": losses,
        "after_first_step": after_step[0],
        "final": after_step[-1],
    }
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden_mlp_adamw.json")
    with open(out, "w") as f:
        json.dump(golden, f)
    print("wrote", out, "grad norms", grad_norms)


if __name__ == "__main__":
    main()
