"""The probe in a transformers.Trainer: `callbacks=[FlatlineCallback(run_dir)]` (docs/DESIGN.md §16).

At on_train_begin it finds what the Trainer built: the model (its forward hooks give the batch and the
loss, `output.loss`), the DistributedDataParallel around it (its communication hook gives the local
gradients and carries the rank faults), the optimizer (accelerate's AcceleratedOptimizer: its torch
optimizer's step hooks, and its GradScaler under fp16 on a GPU). A step begins at on_step_begin and
ends at on_step_end; a save is a checkpoint_save event; a Trainer resumed from a checkpoint
(state.global_step > 0 at on_train_begin) gives checkpoint_load and resume events. The Trainer clips
before the optimizer's step: without DDP the grad norm is the clipped one (with DDP it is taken in the
hook, before clipping).

A scenario's restart: the Trainer saves a checkpoint where the probe asks for one (control.should_save at
on_step_end); resumed (`train(resume_from_checkpoint=True)` where flatline_probe.resuming()), a fault that
drops the sampler's position sets args.ignore_data_skip, which the Trainer reads after on_train_begin:
it then starts the resumed epoch over instead of skipping the batches trained.
"""
from transformers import TrainerCallback

from .probe import Probe


class FlatlineCallback(TrainerCallback):
    def __init__(self, run_dir=None):
        self.run_dir, self.probe = run_dir, None

    def on_train_begin(self, args, state, control, model=None, optimizer=None, **kw):
        scaler = getattr(optimizer, "scaler", None)
        self.probe = Probe(self.run_dir, None, optimizer, scaler, hooks=False)
        self.probe._ends_by_callback = True
        p = self.probe
        if p.plan and p.plan["precision"] == "fp16" and scaler is None:
            raise RuntimeError("flatline probe: the scenario is fp16 (a loss-scale fault) and this Trainer has no "
                               "GradScaler (fp16=True needs a GPU: accelerate runs fp16 on CPU without one)")
        p.watch_optimizer(optimizer)
        if scaler is not None:
            p.watch_scaler(scaler)
        p.watch_model(model, loss_from_output=True)
        if state.global_step > 0:  # resume_from_checkpoint: the Trainer restored its state before this
            p.checkpoint_loaded(state.global_step, f"{args.output_dir}: global step {state.global_step}")
            if p.drops_sampler_state:
                args.ignore_data_skip = True

    def on_step_begin(self, args, state, control, **kw):
        if self.probe:
            self.probe.begin_step()

    def on_step_end(self, args, state, control, **kw):
        if self.probe:
            self.probe.end_step()
            if self.probe.checkpoint_due():
                control.should_save = True

    def on_save(self, args, state, control, **kw):
        if self.probe:
            self.probe.checkpoint_saved(f"{args.output_dir}/checkpoint-{state.global_step}")

    def on_train_end(self, args, state, control, **kw):
        if self.probe:
            self.probe.close()
