"""--loop hf-trainer: peer.py's job trained by the Hugging Face Trainer (transformers).

What a user of transformers.Trainer writes for it, on the CPU:

    TrainingArguments(per_device_train_batch_size=micro_batch,
                      gradient_accumulation_steps=global_batch // micro_batch,
                      max_steps=..., max_grad_norm=..., use_cpu=True, bf16=(precision == "bf16"),
                      eval/save/logging off, report_to="none", train_sampling_strategy="sequential")
    Trainer(model, args, train_dataset, data_collator, optimizers=(optimizer, scheduler))

with peer.py's own AdamW (or SGD) and LambdaLR objects (so the hyper-parameters and schedule are
the same objects, not re-derived from TrainingArguments), and the model wrapped so that its
forward returns {"loss": ...} from `labels`, as a transformers model does. The forward takes
**kwargs, so the Trainer counts the window's labels (`num_items_in_batch`, the non -100 labels of
all the window's micro-batches) and passes the count in; the forward divides the summed
cross-entropy by it, as transformers' causal-LM loss does: the window's token mean, peer.py's
loss exactly, and the Trainer then does not divide by the accumulation steps again. Autocast
(bf16) is the Trainer's: its Accelerator wraps the model's forward.

Windows are timed by a TrainerCallback: on_step_end marks (after the optimizer step, the
scheduler step and zero_grad), the first window from on_train_begin.
"""
import tempfile

import torch

import peer
from peers import common


class WithLoss(torch.nn.Module):
    """A bigbatch_torch model whose forward returns {"loss": ...}, as a transformers model given
    `labels`: summed / num_items_in_batch where the Trainer passes it, else the mean. It keeps each
    micro-batch's loss for the window's record."""

    def __init__(self, model):
        super().__init__()
        self.model = model
        self.losses = []

    def forward(self, inputs, labels, num_items_in_batch=None, **kwargs):
        loss, _ = peer.micro_loss(self.model, inputs, labels, num_items_in_batch)
        self.losses.append(loss.detach())
        return {"loss": loss}


def run(job):
    import transformers
    from transformers import PrinterCallback, Trainer, TrainerCallback, TrainingArguments

    args = job.args
    stream = common.window_stream(job)  # before the Trainer, which seeds the generator
    clock = common.WindowClock(job, stream)
    model = WithLoss(job.model)

    class Clock(TrainerCallback):
        def on_train_begin(self, *_, **__):
            clock.start()

        def on_step_end(self, *_, **__):
            loss = sum(loss.item() for loss in model.losses)
            model.losses.clear()
            clock.window_done(loss)

    with tempfile.TemporaryDirectory(prefix="peer-hf-") as scratch:  # nothing is written there
        training_args = TrainingArguments(
            output_dir=scratch, per_device_train_batch_size=args.micro_batch,
            gradient_accumulation_steps=args.global_batch // args.micro_batch,
            max_steps=common.window_count(job), max_grad_norm=job.max_grad_norm,
            use_cpu=True, bf16=args.precision == "bf16", seed=args.seed,
            eval_strategy="no", save_strategy="no", logging_strategy="no", report_to="none",
            disable_tqdm=True, train_sampling_strategy="sequential", remove_unused_columns=False)
        trainer = Trainer(model=model, args=training_args,
                          train_dataset=common.StreamDataset(job.data, stream),
                          data_collator=common.pass_through,
                          optimizers=(job.optimizer, job.scheduler), callbacks=[Clock()])
        trainer.remove_callback(PrinterCallback)  # it prints the final metrics to stdout
        trainer.train()
    clock.summary(transformers=transformers.__version__,
                  num_items_in_batch=trainer.model_accepts_loss_kwargs)
