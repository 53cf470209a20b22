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

A Hugging Face model (--model hf) is given to the Trainer as it is, trained with its own loss
from `labels`, the usage transformers documents:
- a causal LM gets its targets also as `shift_labels` (the targets as they are, not shifted
  again: bigbatch's T targets per block of T inputs, which `labels` alone would shift to T - 1),
  which the Trainer counts for num_items_in_batch and the model's loss divides by: the window's
  token mean, as above;
- a classifier (BertForSequenceClassification) computes the micro-batch's mean loss and ignores
  num_items_in_batch, but its forward takes **kwargs, so the Trainer would pass the count and then
  not divide by the accumulation steps: every window's gradient would be (accumulation steps)
  times the window's (docs/PEER_CORRECTNESS.md, the classification case). The model is marked
  `accepts_loss_kwargs = False`, the attribute transformers' own models set where their loss
  takes no count, so that the Trainer divides by the steps: the window's mean (every micro-batch
  the same size), the loss every other side trains on.
Each micro-batch's loss is read by a forward hook on the model.

Windows are timed by a TrainerCallback: on_step_end marks (after the optimizer step, the
scheduler step and zero_grad), the first window from on_train_begin.
"""
import tempfile

import torch

import peer
from peers import common


class WithLoss(torch.nn.Module):
    """A bigbatch_torch model whose forward returns {"loss": ...}, as a transformers model given
    `labels`: summed / num_items_in_batch where the Trainer passes it, else the mean."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, inputs, labels, num_items_in_batch=None, **kwargs):
        loss, _ = peer.micro_loss(self.model, inputs, labels, num_items_in_batch)
        return {"loss": loss}


def trained_model(job):
    """(the model the Trainer trains, the batch builder of its data set): a transformers model
    as it is (a classifier marked accepts_loss_kwargs = False, the module docstring says why),
    a bigbatch_torch model in WithLoss."""
    hf = getattr(job.model, "hf", None)  # hf_models.HfLogits
    if hf is None:
        return WithLoss(job.model), common.inputs_and_labels
    if not job.token_loss:
        hf.accepts_loss_kwargs = False
    return hf, job.data.model_inputs


def run(job):
    import transformers
    from transformers import PrinterCallback, Trainer, TrainerCallback, TrainingArguments

    args = job.args
    stream = common.window_stream(job)  # before the Trainer, which seeds the generator
    clock = common.WindowClock(job, stream)
    model, batch_of = trained_model(job)
    losses = []
    model.register_forward_hook(lambda module, inputs, output: losses.append(
        output["loss"].detach()))
    steps = args.global_batch // args.micro_batch

    class Clock(TrainerCallback):
        def on_train_begin(self, *_, **__):
            clock.start()

        def on_step_end(self, *_, **__):
            # Divided by num_items_in_batch, the micro-batches' losses add up to the window's
            # mean; else each is its micro-batch's mean.
            scale = 1.0 if trainer.model_accepts_loss_kwargs else 1.0 / steps
            clock.window_done(scale * sum(loss.item() for loss in losses))
            losses.clear()

    with tempfile.TemporaryDirectory(prefix="peer-hf-") as scratch:  # nothing is written there
        training_args = TrainingArguments(
            output_dir=scratch, per_device_train_batch_size=args.micro_batch,
            gradient_accumulation_steps=steps,
            max_steps=common.window_count(job), max_grad_norm=job.max_grad_norm,
            use_cpu=True, bf16=args.precision == "bf16", seed=args.seed,
            eval_strategy="no", save_strategy="no", logging_strategy="no", report_to="none",
            disable_tqdm=True, train_sampling_strategy="sequential", remove_unused_columns=False)
        trainer = Trainer(model=model, args=training_args,
                          train_dataset=common.StreamDataset(job.data, stream, batch_of),
                          data_collator=common.pass_through,
                          optimizers=(job.optimizer, job.scheduler), callbacks=[Clock()])
        trainer.remove_callback(PrinterCallback)  # it prints the final metrics to stdout
        trainer.train()
    clock.summary(transformers=transformers.__version__,
                  num_items_in_batch=trainer.model_accepts_loss_kwargs)
