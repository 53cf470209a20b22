"""--loop accelerate: peer.py's job in the loop of Accelerate's gradient-accumulation guide.

The guide's loop (https://huggingface.co/docs/accelerate/usage_guides/gradient_accumulation),
with its clipping as the guide shows it:

    accelerator = Accelerator(gradient_accumulation_steps=global_batch // micro_batch,
                              mixed_precision="bf16" or "no", cpu=True)
    model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    for batch in loader:
        with accelerator.accumulate(model):
            loss = loss_function(model(inputs), targets)      # the micro-batch's mean
            accelerator.backward(loss)                        # divides by the accumulation steps
            if accelerator.sync_gradients:
                accelerator.clip_grad_norm_(model.parameters(), max_grad_norm)
            optimizer.step(); scheduler.step(); optimizer.zero_grad()

`optimizer`, `scheduler` and `loader` are Accelerate's wrappers of peer.py's optimizer, LambdaLR
and a DataLoader over its micro-batches: they step and zero only when `sync_gradients` (at the
window's last micro-batch). Every micro-batch has the same number of tokens (samples), so mean /
accumulation steps is peer.py's sum / the window's count (up to rounding). Autocast (bf16) is
Accelerate's, around the prepared model's forward. A window ends after the step at a sync.
"""
import torch

import peer
from peers import common


def run(job):
    import accelerate
    from accelerate import Accelerator

    args = job.args
    stream = common.window_stream(job)
    clock = common.WindowClock(job, stream)
    steps = args.global_batch // args.micro_batch
    accelerator = Accelerator(gradient_accumulation_steps=steps, cpu=True,
                              mixed_precision="bf16" if args.precision == "bf16" else "no")
    loader = torch.utils.data.DataLoader(common.StreamDataset(job.data, stream),
                                         batch_size=args.micro_batch,
                                         collate_fn=common.pass_through)
    model, optimizer, loader, scheduler = accelerator.prepare(job.model, job.optimizer, loader,
                                                              job.scheduler)
    model.train()
    clock.start()
    window_loss = 0.0
    for batch in loader:
        with accelerator.accumulate(model):
            loss, logits = peer.micro_loss(model, batch["inputs"], batch["labels"], None)
            accelerator.backward(loss)
            if accelerator.sync_gradients and job.max_grad_norm > 0:
                accelerator.clip_grad_norm_(model.parameters(), job.max_grad_norm)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
        window_loss += loss.item() / steps
        if accelerator.sync_gradients:
            clock.window_done(window_loss)
            window_loss = 0.0
    clock.summary(accelerate=accelerate.__version__,
                  mixed_precision=accelerator.mixed_precision,
                  native_amp=accelerator.native_amp)
