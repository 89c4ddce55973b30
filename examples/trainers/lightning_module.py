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
from flatline_probe import FlatlineLightningCallback, load_plan  # noqa: E402

steps, seed, timeout_s, fp16, device = shape(load_plan())


class ByteLM(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = TinyLM()

    def training_step(self, batch, batch_idx):
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
trainer = pl.Trainer(accelerator="gpu" if device.type == "cuda" else "cpu", devices=world, max_steps=steps, plugins=amp,
                     strategy=pl.strategies.DDPStrategy(process_group_backend="gloo",
                                                        timeout=timedelta(seconds=timeout_s)),
                     gradient_clip_val=1.0, logger=False,
                     default_root_dir=os.environ.get("FLATLINE_TRAINER_DIR", "runs/lightning-module/trainer"),
                     enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                     callbacks=[FlatlineLightningCallback("runs/lightning-module")])
loader = torch.utils.data.DataLoader(ByteWindows(), batch_size=8, shuffle=True, drop_last=True)
trainer.fit(ByteLM(), loader)
