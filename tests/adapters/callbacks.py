"""Small real callbacks, written as a team would, that the adapter tests score through flatline."""
import logging

from lightning.pytorch import Callback
from transformers import TrainerCallback

log = logging.getLogger(__name__)


class StopOnZeroLr(TrainerCallback):
    """Stops training once the logged learning rate is 0 after having been above 0."""

    def __init__(self):
        self.peak = 0.0

    def on_log(self, args, state, control, logs=None, **kwargs):
        lr = (logs or {}).get("learning_rate")
        if lr is None:
            return
        self.peak = max(self.peak, lr)
        if lr == 0 and self.peak > 0:
            control.should_training_stop = True


class WarnOnZeroLr(Callback):
    """Logs a warning once the optimizer's lr is 0 after having been above 0."""

    def __init__(self):
        self.peak, self.warned = 0.0, False

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        lr = trainer.optimizers[0].param_groups[0]["lr"]
        self.peak = max(self.peak, lr)
        if lr == 0 and self.peak > 0 and not self.warned:
            self.warned = True
            log.warning("learning rate is 0 at global step %d (loss %.3f)", trainer.global_step,
                        float(outputs["loss"]))
