"""A Lightning module with flatline's probe (docs/DESIGN.md §16): callbacks=[FlatlineLightningCallback()].

    torchrun --nproc-per-node 2 examples/trainers/lightning_module.py
    flatline score scenarios/external --trainer "python examples/trainers/lightning_module.py"
"""
import os
import sys
from datetime import timedelta

import lightning.pytorch as pl
import torch
from lightning.pytorch.plugins import MixedPrecision

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import ByteWindows, TinyLM, shape, warmup_cosine  # noqa: E402
from flatline_probe import FlatlineLightningCallback, load_plan, resuming  # noqa: E402

steps, seed, timeout_s, fp16, device = shape(load_plan())


class ResumableLoader(torch.utils.data.DataLoader):
    """A DataLoader that resumes mid-epoch: Lightning saves its state_dict with each checkpoint and gives it
    back at a resume (a loader without one starts its epoch over). The state is the batches of the epoch
    trained, which the module counts (Lightning fetches a batch ahead of training)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.trained, self._skip = 0, 0

    def __iter__(self):
        it = super().__iter__()
        skip, self._skip = self._skip, 0
        self.trained = skip
        for _ in range(skip):
            next(it)
        return it

    def state_dict(self):
        return {"trained": self.trained}

    def load_state_dict(self, state):
        self._skip = state["trained"]


class ByteLM(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = TinyLM()

    def training_step(self, batch, batch_idx):
        self.trainer.train_dataloader.trained += 1  # before a checkpoint at this batch's end is saved
        x, y = batch
        return self.net(x, y)

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=3e-3, weight_decay=0.1)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": warmup_cosine(opt, 5, steps), "interval": "step"}}


pl.seed_everything(seed, verbose=False)
world = int(os.environ.get("WORLD_SIZE", 1))
# fp16 with a GradScaler: Trainer(precision="16-mixed") on a GPU; on the CPU Lightning turns that flag
# into bf16 (no scaler), so the same mixed precision is given as its plugin, which it runs as asked.
amp = [MixedPrecision("16-mixed", device.type)] if fp16 else []
out = os.environ.get("FLATLINE_TRAINER_DIR", "runs/lightning-module/trainer")  # the job's own outputs
ckpt = os.path.join(out, "last.ckpt")
trainer = pl.Trainer(accelerator="gpu" if device.type == "cuda" else "cpu", devices=world, max_steps=steps, plugins=amp,
                     strategy=pl.strategies.DDPStrategy(process_group_backend="gloo",
                                                        timeout=timedelta(seconds=timeout_s)),
                     gradient_clip_val=1.0, logger=False, default_root_dir=out,
                     enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                     callbacks=[FlatlineLightningCallback("runs/lightning-module", checkpoint_path=ckpt)])
loader = ResumableLoader(ByteWindows(), batch_size=8, shuffle=True, drop_last=True)
# resuming(): the scenario's restart: resume from the checkpoint the probe asked for
trainer.fit(ByteLM(), loader, ckpt_path=ckpt if resuming() else None)
