"""--loop lightning: peer.py's job trained by lightning.Trainer (PyTorch Lightning 2.x).

What a Lightning user writes for it, on the CPU:

    class Module(lightning.LightningModule):
        def training_step(self, batch, batch_idx):        # the micro-batch's mean loss
            return loss_function(self.model(inputs), targets)
        def configure_optimizers(self):
            return {"optimizer": optimizer,
                    "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    lightning.Trainer(accumulate_grad_batches=global_batch // micro_batch,
                      gradient_clip_val=max_grad_norm (None where 0), precision="bf16-mixed" or
                      "32-true", accelerator="cpu", devices=1, max_steps=..., logger=False,
                      enable_checkpointing=False, enable_progress_bar=False,
                      enable_model_summary=False).fit(module, loader)

with peer.py's own optimizer and LambdaLR objects. Lightning divides the returned loss by
accumulate_grad_batches, zeroes the gradients at a window's first micro-batch, clips (norm) and
steps the optimizer at its last, then steps the "step"-interval scheduler: every micro-batch
being the same size, the window's gradient is peer.py's (up to rounding). Autocast (bf16) is
Lightning's precision plugin, around training_step. Windows are timed by a Callback:
on_train_batch_end of a window's last micro-batch (after the optimizer and scheduler steps),
the first window from on_train_start.
"""
import tempfile
import warnings

import torch

import peer
from peers import common


def run(job):
    import lightning
    from lightning.pytorch import Callback, LightningModule, Trainer

    args = job.args
    stream = common.window_stream(job)
    clock = common.WindowClock(job, stream)
    steps = args.global_batch // args.micro_batch
    loader = torch.utils.data.DataLoader(common.StreamDataset(job.data, stream),
                                         batch_size=args.micro_batch,
                                         collate_fn=common.pass_through)

    class Module(LightningModule):
        def __init__(self):
            super().__init__()
            self.model = job.model

        def training_step(self, batch, batch_idx):
            return peer.micro_loss(self.model, batch["inputs"], batch["labels"], None)[0]

        def configure_optimizers(self):
            return {"optimizer": job.optimizer,
                    "lr_scheduler": {"scheduler": job.scheduler, "interval": "step"}}

    class Clock(Callback):
        window_loss = 0.0

        def on_train_start(self, trainer, module):
            clock.start()

        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            self.window_loss += outputs["loss"].item()  # Lightning's: / accumulate_grad_batches
            if (batch_idx + 1) % steps == 0:
                clock.window_done(self.window_loss)
                self.window_loss = 0.0

    # Its advice to use DataLoader workers (the data is in memory, one gather per micro-batch).
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")
    with tempfile.TemporaryDirectory(prefix="peer-lightning-") as scratch:  # nothing written
        trainer = Trainer(
            accumulate_grad_batches=steps,
            gradient_clip_val=job.max_grad_norm if job.max_grad_norm > 0 else None,
            precision="bf16-mixed" if args.precision == "bf16" else "32-true",
            accelerator="cpu", devices=1, max_steps=common.window_count(job), max_epochs=1,
            logger=False, enable_checkpointing=False, enable_progress_bar=False,
            enable_model_summary=False, use_distributed_sampler=False, default_root_dir=scratch,
            callbacks=[Clock()])
        trainer.fit(Module(), train_dataloaders=loader)
    clock.summary(lightning=lightning.__version__, precision_plugin=trainer.precision)
