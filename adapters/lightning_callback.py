#!/usr/bin/env python3
"""Runs a PyTorch Lightning Callback, unmodified, as a flatline external detector.

    flatline score --detector mycb='python3 adapters/lightning_callback.py mypkg.callbacks:LrWatch'

A real lightning.pytorch.Trainer fits a stand-in LightningModule whose training data is flatline's
telemetry stream, so the callback gets every hook with the objects Lightning passes
(on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx) and the rest): one batch per
optimizer step of rank 0 (the process that logs), read from stdin as it arrives; batch = that step
record (a dict); the module logs "train_loss" (the record's loss: trainer.callback_metrics,
outputs["loss"]) and "grad_norm" where recorded, and the optimizer's lr is set to the record's lr
before the step (trainer.optimizers[0].param_groups[0]["lr"]); trainer.global_step counts the steps.
The module's one parameter gets a zero gradient, so the optimizer step changes nothing.

Alarms: trainer.should_stop set by the callback -> an alarm (and Lightning stops the fit, as for
EarlyStopping); an exception a hook raises -> an alarm with its message; a warning or WARNING+ log
record from the callback's own source file -> an alarm. They name no cause unless --cause is given.
Then the adapter reads stdin to its end. Lightning's fit loop fetches the next batch before it calls
on_train_batch_end, so an alarm is stamped one record after the step it is about.
"""
import logging
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import flatline_protocol as fp  # noqa: E402


def main():
    a = fp.arguments(__doc__, "lightning.pytorch.Callback", "--log-every-n-steps",
                     "Trainer(log_every_n_steps=...) (default 1)")

    import torch
    import lightning.pytorch as pl
    from torch.utils.data import DataLoader, IterableDataset

    for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.ERROR)  # Lightning's own notes are not alarms
    warnings.filterwarnings("ignore", module="lightning")

    cls = fp.load_class(a.callback, a.path + [os.getcwd()])
    alarms = fp.Alarms(a.cause)
    seen = {"step": 0, "hook": "setup"}

    class Steps(IterableDataset):  # rank 0's step records, read as they arrive
        def __iter__(self):
            for rec in fp.records():
                if rec.get("kind") == "step" and rec.get("rank", 0) == 0:
                    yield {k: v for k, v in rec.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}

    class Replay(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1))

        def on_train_batch_start(self, batch, batch_idx):
            seen["step"] = int(batch.get("step", 0))
            if "lr" in batch:
                for g in self.trainer.optimizers[0].param_groups:
                    g["lr"] = float(batch["lr"])

        def training_step(self, batch, batch_idx):
            loss = self.w.sum() * 0 + float(batch.get("loss", float("nan")))
            self.log("train_loss", loss, on_step=True, prog_bar=False)
            if "grad_norm" in batch:
                self.log("grad_norm", float(batch["grad_norm"]), on_step=True)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.0)

    class Stopped(pl.Callback):  # runs after the user's: did it stop the fit?
        def on_train_batch_end(self, trainer, *args):
            if trainer.should_stop and not getattr(self, "said", False):
                self.said = True
                alarms.raise_(f"{cls.__name__} set trainer.should_stop at step {seen['step']}", step=seen["step"])

    fp.Watch(cls, alarms, lambda: f"{cls.__name__} at step {seen['step']}")
    trainer = pl.Trainer(max_epochs=1, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                         log_every_n_steps=a.log_every_n_steps, callbacks=[cls(), Stopped()])
    try:
        trainer.fit(Replay(), train_dataloaders=DataLoader(Steps(), batch_size=None))
    except Exception as e:  # what the callback raised is its alarm
        alarms.raise_(f"{cls.__name__} raised {type(e).__name__}: {e} (at step {seen['step']})", step=seen["step"])
    fp.drain()


if __name__ == "__main__":
    main()
