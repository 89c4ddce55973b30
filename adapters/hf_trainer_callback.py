#!/usr/bin/env python3
"""Runs a Hugging Face transformers TrainerCallback, unmodified, as a flatline external detector.

    flatline score --detector mycb='python3 adapters/hf_trainer_callback.py mypkg.callbacks:PlateauStop'

flatline's telemetry stream drives the callback through transformers' own CallbackHandler with the
arguments the Trainer passes (transformers/trainer.py, the training loop and Trainer.log): a real
TrainingArguments, TrainerState and TrainerControl; on_train_begin, then for each optimizer step of
rank 0 (the process that logs) on_step_begin and on_step_end with state.global_step and state.epoch
set, and every --logging-steps steps on_log with the dict the Trainer logs ({"loss": the interval's
mean rounded to 4 digits, "grad_norm", "learning_rate", "epoch"}, also appended to
state.log_history); eval records call on_evaluate with {"eval_loss", "epoch"}; checkpoint events
on_save; the end of the stream on_train_end. model, optimizer and the dataloaders are None: there is
no model here, only its telemetry.

Alarms: control.should_training_stop (or should_save / should_evaluate set by the callback itself, not
by the flow) -> an alarm naming the hook and the step; an exception raised by a hook -> an alarm with
its message (the stream then stops driving the callback, as a crashed Trainer would); a warning or a
WARNING+ log record from the callback's own source file -> an alarm. Alarms name no cause unless
--cause is given (most callbacks only say "stop"). After the callback stopped training the adapter
reads stdin to its end.
"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import flatline_protocol as fp  # noqa: E402


def main():
    a = fp.arguments(__doc__, "transformers.TrainerCallback", "--logging-steps",
                     "TrainingArguments.logging_steps (default 1)")

    from transformers import TrainerControl, TrainerState, TrainingArguments
    from transformers.trainer_callback import CallbackHandler

    cls = fp.load_class(a.callback, a.path + [os.getcwd()])
    callback = cls()
    alarms = fp.Alarms(a.cause)
    state = TrainerState()
    state.logging_steps = a.logging_steps
    state.is_local_process_zero = state.is_world_process_zero = True
    where = {"hook": "on_init_end"}
    fp.Watch(cls, alarms, lambda: f"{cls.__name__}.{where['hook']} at global_step {state.global_step}")
    out_dir = tempfile.mkdtemp(prefix="flatline-hf-adapter-")
    args = TrainingArguments(output_dir=out_dir, logging_steps=a.logging_steps, report_to=[], use_cpu=True)
    handler = CallbackHandler([callback], None, None, None, None)
    control = TrainerControl()

    def call(hook, **kw):
        nonlocal control
        where["hook"] = hook
        before = (control.should_save, control.should_evaluate)
        try:
            control = getattr(handler, hook)(args, state, control, **kw)
        except Exception as e:  # what the callback raises is its alarm; the Trainer would be gone
            alarms.raise_(f"{cls.__name__}.{hook} at global_step {state.global_step} raised "
                          f"{type(e).__name__}: {e}", step=state.global_step)
            return False
        for flag, was in zip(("should_save", "should_evaluate"), before):
            if getattr(control, flag) and not was:
                alarms.raise_(f"{cls.__name__}.{hook} set control.{flag} at global_step {state.global_step}",
                              step=state.global_step)
                setattr(control, flag, False)
        if control.should_training_stop:
            alarms.raise_(f"{cls.__name__}.{hook} set control.should_training_stop at global_step "
                          f"{state.global_step}", step=state.global_step)
            return False
        return True

    going = call("on_init_end") and call("on_train_begin")
    loss_sum, loss_n = 0.0, 0
    for rec in fp.records() if going else []:
        if rec.get("rank", 0) != 0:
            continue
        kind = rec.get("kind")
        if kind == "step":
            state.global_step = rec["step"]
            state.epoch = float(rec.get("epoch", 0))
            loss = rec.get("loss_avg", rec.get("loss"))
            if isinstance(loss, (int, float)) and not rec.get("skipped", False):
                loss_sum, loss_n = loss_sum + loss, loss_n + 1
            if not (call("on_step_begin") and call("on_step_end")):
                break
            if state.global_step % a.logging_steps == 0:
                logs = {}
                if loss_n:
                    logs["loss"] = round(loss_sum / loss_n, 4)
                if "grad_norm" in rec:
                    logs["grad_norm"] = rec["grad_norm"]
                if "lr" in rec:
                    logs["learning_rate"] = rec["lr"]
                logs["epoch"] = state.epoch
                loss_sum, loss_n = 0.0, 0
                state.log_history.append({**logs, "step": state.global_step})
                if not call("on_log", logs=logs):
                    break
        elif kind == "eval" and "eval_loss" in rec:
            metrics = {"eval_loss": rec["eval_loss"], "epoch": state.epoch}
            state.log_history.append({**metrics, "step": state.global_step})
            if not call("on_evaluate", metrics=metrics):
                break
        elif kind == "event" and rec.get("name") == "checkpoint_save":
            if not call("on_save"):
                break
    else:
        if going:
            call("on_train_end")
    fp.drain()


if __name__ == "__main__":
    main()
