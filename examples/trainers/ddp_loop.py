"""A plain PyTorch DDP loop with flatline's probe (docs/DESIGN.md §16): one attach() and one probe.loss();
a checkpoint where `probe.checkpoint_due()` says so, and a resume from it where `resuming()` (the
scenario's restart: flatline, or torchrun, stopped the job and started it again).

    torchrun --nproc-per-node 2 examples/trainers/ddp_loop.py        # telemetry in runs/ddp-loop
    flatline score scenarios/external                                # each of the five causes injected
"""
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import ByteWindows, TinyLM, shape, warmup_cosine  # noqa: E402
from flatline_probe import attach, load_plan, resuming  # noqa: E402

plan = load_plan()
steps, seed, timeout_s, fp16, device = shape(plan)
if device.type == "cuda":
    torch.cuda.set_device(device)
dist.init_process_group("gloo", timeout=timedelta(seconds=timeout_s))  # Gloo: ranks may share a GPU
torch.manual_seed(seed)
data = ByteWindows()
sampler = DistributedSampler(data, shuffle=True, seed=seed)
model = DDP(TinyLM().to(device), device_ids=[device.index] if device.type == "cuda" else None)
opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
sched = warmup_cosine(opt, 5, steps)
scaler = torch.amp.GradScaler(device.type) if fp16 else None
probe = attach("runs/ddp-loop", model, opt, scaler=scaler, sampler=BatchSampler(sampler, 8, drop_last=True),
               plan=plan)
loader = DataLoader(data, batch_sampler=probe.sampler)
out = os.environ.get("FLATLINE_TRAINER_DIR", "runs/ddp-loop/trainer")  # the job's own outputs
ckpt_path = os.path.join(out, "checkpoint.pt")

step, epoch = 0, 0
if resuming():  # the sampler wrapper skips the batches of the epoch trained (probe.checkpoint_loaded)
    ck = torch.load(ckpt_path, map_location=device, weights_only=True)
    model.module.load_state_dict(ck["model"])
    opt.load_state_dict(ck["optimizer"])
    sched.load_state_dict(ck["scheduler"])
    if scaler:
        scaler.load_state_dict(ck["scaler"])
    step = ck["step"]
    epoch = step // len(loader)
    probe.checkpoint_loaded(step, ckpt_path)
while step < steps:
    sampler.set_epoch(epoch)
    for x, y in loader:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        with torch.autocast(device.type, dtype=torch.float16, enabled=fp16):
            loss = probe.loss(model(x, y))
        opt.zero_grad(set_to_none=True)
        if scaler:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
        sched.step()
        step += 1
        if probe.checkpoint_due():
            if dist.get_rank() == 0:
                os.makedirs(out, exist_ok=True)
                torch.save({"model": model.module.state_dict(), "optimizer": opt.state_dict(),
                            "scheduler": sched.state_dict(), "scaler": scaler.state_dict() if scaler else None,
                            "step": step}, ckpt_path + ".tmp")
                os.replace(ckpt_path + ".tmp", ckpt_path)
            dist.barrier()
            probe.checkpoint_saved(ckpt_path)
        if step >= steps:
            break
    epoch += 1
probe.close()
dist.barrier()  # no rank closes its connections while a peer may still use them
dist.destroy_process_group()
