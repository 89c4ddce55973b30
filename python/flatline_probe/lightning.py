"""The probe in a Lightning Trainer: `callbacks=[FlatlineLightningCallback(run_dir)]` (docs/DESIGN.md §16).

Lightning calls the optimizer's step with a closure that runs the forward and backward inside it, so the
update's statistics and the lr faults are taken at on_before_optimizer_step (gradients ready, update not
made), not at the optimizer's step pre-hook. The batch comes to on_train_batch_start (hashed, replaced
in place where the plan replays one), the loss to on_train_batch_end; the DDP module is the strategy's.
A checkpoint saved is a checkpoint_save event; one restored (fit's ckpt_path) checkpoint_load and resume.

A scenario's restart: the callback saves a checkpoint where the probe asks for one (trainer.save_checkpoint
to `checkpoint_path`, default <default_root_dir>/last.ckpt, at on_train_batch_end); the job resumes with
fit(ckpt_path=...) where flatline_probe.resuming(). A fault that drops the sampler's position removes the
loaders' state from the checkpoint being restored (on_load_checkpoint comes before Lightning restores its
loops): Lightning then starts the resumed epoch over, as it does for any loader without a state_dict.
"""
import os

try:
    from lightning.pytorch import Callback
except ImportError:  # the standalone package
    from pytorch_lightning import Callback

from .plan import load_plan, resuming
from .probe import Probe


class FlatlineLightningCallback(Callback):
    def __init__(self, run_dir=None, checkpoint_path=None):
        self.run_dir, self.probe = run_dir, None
        self.checkpoint_path = checkpoint_path
        self._restored = None  # the global step of a checkpoint Lightning restored before training began

    def on_train_start(self, trainer, pl_module):
        opt = trainer.optimizers[0]
        scaler = getattr(trainer.precision_plugin, "scaler", None)
        self.probe = p = Probe(self.run_dir, None, opt, scaler, hooks=False)
        self.probe._ends_by_callback = True
        if p.plan and p.plan["precision"] == "fp16" and scaler is None:
            raise RuntimeError("flatline probe: the scenario is fp16 (a loss-scale fault) and this Trainer has no "
                               "GradScaler (precision='16-mixed' on a GPU; on the CPU, "
                               "plugins=[MixedPrecision('16-mixed', 'cpu')])")
        p._manual_before_update = True
        p.watch_optimizer(opt)
        if scaler is not None:
            p.watch_scaler(scaler)
        p.watch_ddp(trainer.strategy.model)
        if self._restored:
            p.checkpoint_loaded(self._restored, f"global step {self._restored}")

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.probe.begin_step()
        self.probe.batch(batch)

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        self.probe.before_update()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if loss is not None:
            self.probe.loss(loss)
        self.probe.end_step()
        if self.probe.checkpoint_due():
            trainer.save_checkpoint(self.checkpoint_path or os.path.join(trainer.default_root_dir, "last.ckpt"))

    def on_save_checkpoint(self, trainer, pl_module, checkpoint):
        if self.probe:
            self.probe.checkpoint_saved(f"global step {trainer.global_step}")

    def on_load_checkpoint(self, trainer, pl_module, checkpoint):
        # called while fit restores ckpt_path, before on_train_start (the probe is made there) and before
        # Lightning restores its loops
        self._restored = int(checkpoint.get("global_step", 0)) or None
        plan = load_plan() if resuming() else None
        if plan and plan.get("resume") and not plan["resume"]["restore_sampler"]:
            fit = checkpoint.get("loops", {}).get("fit_loop", {}).get("state_dict", {})
            fit.pop("combined_loader", None)

    def on_train_end(self, trainer, pl_module):
        if self.probe:
            self.probe.close()
