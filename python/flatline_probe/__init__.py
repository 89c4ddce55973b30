"""flatline's probe for your own training (docs/DESIGN.md §16).

It writes flatline's telemetry contract (docs/DESIGN.md §3) into a run directory that `flatline
diagnose`, `--follow`, `replay` and `score` read unchanged, and, when a plan is given (FLATLINE_PLAN,
written by `flatline run` / `score` for a scenario with an external `trainer`, or FLATLINE_SCENARIO,
planned with `flatline plan`), injects the scenario's faults into that same training.

    probe = attach(run_dir, model, optimizer, scaler=None, sampler=None)   # a plain PyTorch loop
    callbacks=[FlatlineCallback(run_dir)]                                   # transformers.Trainer
    callbacks=[FlatlineLightningCallback(run_dir)]                          # lightning.Trainer

Standard library and torch only; the framework callbacks import their framework when used.
"""
from .plan import PlanError, load_plan, resuming
from .probe import Probe, attach

__all__ = ["Probe", "attach", "load_plan", "resuming", "PlanError", "FlatlineCallback", "FlatlineLightningCallback"]


def __getattr__(name):
    if name == "FlatlineCallback":
        from .hf import FlatlineCallback
        return FlatlineCallback
    if name == "FlatlineLightningCallback":
        from .lightning import FlatlineLightningCallback
        return FlatlineLightningCallback
    raise AttributeError(name)
