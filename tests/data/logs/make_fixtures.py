#!/usr/bin/env python3
"""Writes the reader test fixtures (tests/data/logs/<format>/<case>.*): small logs in each format,
generated from one seeded model of a training run so that every format tells the same story.
Cases: healthy (warmup from lr 0, the fp16 initial loss-scale search where the format logs a scale,
a cosine tail down to 0.2% of peak), lr_zero (the schedule reaches 0 at step 400 and stays),
collapse (fp16 loss scale halves on every step from step 300 until it is tiny / the run exits).
The TensorBoard files are framed and encoded here by hand (TFRecord + protobuf wire format), not with
flatline's own code, so the reader is checked against an independent writer. Deterministic: rerun
to regenerate; the tests assert exact values from these files.
"""
import json, math, os, random, struct

HERE = os.path.dirname(os.path.abspath(__file__))
STEPS, PEAK, WARMUP = 600, 3e-4, 50


def lr_at(case, s):
    if s <= WARMUP:
        return PEAK * (s - 1) / WARMUP if s >= 1 else 0.0   # lr 0 on the first step
    if case == "lr_zero":
        if s >= 400:
            return 0.0
        p = (s - WARMUP) / (400 - WARMUP)
        return PEAK * 0.5 * (1 + math.cos(math.pi * p))
    p = (s - WARMUP) / (STEPS - WARMUP)
    lo = 0.002 * PEAK
    return lo + (PEAK - lo) * 0.5 * (1 + math.cos(math.pi * p))


def run(case, seed=7):
    """Per step: dict(step, loss, lr, grad_norm, scale, skipped)."""
    rnd = random.Random(seed)
    out, scale = [], 65536.0
    for s in range(1, STEPS + 1):
        loss = 2.0 + 3.0 * math.exp(-s / 150.0) + rnd.uniform(-0.03, 0.03)
        g = 1.0 + 0.5 * math.exp(-s / 100.0) + rnd.uniform(-0.05, 0.05)
        skipped = False
        if s <= 3:                       # initial scale search: 65536 -> 8192
            skipped = True
        if case == "collapse" and s >= 300:
            skipped = True
        used = scale
        if skipped:
            scale = scale / 2
        out.append(dict(step=s, loss=loss, lr=lr_at(case, s), grad_norm=None if skipped else g,
                        scale=used, next_scale=scale, skipped=skipped))
    return out


def mix64(x):
    """splitmix64: batch hashes are well-mixed 64-bit values, as the harness writes them."""
    x = (x + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return x ^ (x >> 31)


def write(path, text, mode="w"):
    path = os.path.join(HERE, path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, mode) as f:
        f.write(text)


# --- flatline JSONL: 2 ranks; zero_grad_rank: rank 1 sends zeros from step 300 ---------------------------
def flatline(case):
    for rank in (0, 1):
        lines = []
        for r in run("healthy" if case != "lr_zero" else "lr_zero"):
            s = r["step"]
            t = round(0.1 * s + 0.001 * rank, 4)
            local = 0.0 if (case == "zero_grad_rank" and rank == 1 and s >= 300) else round(r["grad_norm"] or 0, 6)
            rec = dict(kind="step", rank=rank, t=t, step=s, opt_step=s, loss=round(r["loss"] + 0.01 * rank, 6),
                       lr=r["lr"], grad_norm=round(r["grad_norm"] or 0, 6), local_grad_norm=local, loss_scale=1,
                       overflow=False, skipped=False, batch_hash="%016x" % mix64(s * 2 + rank))
            lines.append(json.dumps(rec))
            if s % 2 == 0:
                lines.append(json.dumps(dict(kind="heartbeat", rank=rank, t=round(t + 0.05, 4), step=s + 1,
                                             phase="compute")))
        write(f"flatline/{case}/telemetry/rank-{rank}.jsonl", "\n".join(lines) + "\n")


# --- Hugging Face trainer_state.json (Python json.dump: bare NaN / Infinity) ----------------------------
def hf(case):
    hist = []
    for r in run(case):
        s = r["step"]
        if s == 1 or s % 10 == 0:
            hist.append({"epoch": round(s / 200, 4), "grad_norm": r["grad_norm"] if r["grad_norm"] else float("nan"),
                         "learning_rate": r["lr"], "loss": round(r["loss"], 4), "step": s})
        if s % 200 == 0:
            hist.append({"epoch": s / 200, "eval_loss": round(r["loss"] + 0.1, 4), "eval_runtime": 1.5, "step": s})
    hist.append({"epoch": 3.0, "step": STEPS, "total_flos": 1e15, "train_loss": 2.5, "train_runtime": 100.0})
    if case == "healthy":
        hist[5]["grad_norm"] = float("inf")
    state = {"best_metric": None, "epoch": 3.0, "global_step": STEPS, "log_history": hist, "logging_steps": 10,
             "max_steps": STEPS}
    write(f"hf/{case}/trainer_state.json", json.dumps(state, indent=2, sort_keys=True) + "\n")


# --- Megatron-LM: training_log lines every 10 iterations, fp16 with a 2^32 initial scale -----------------
def megatron(case, stamped, interval=10, steps=STEPS, name=None):
    lines = ["using world size: 8, data-parallel size: 8", "> building GPT model ...",
             "[after dataloaders are built] datetime: 2024-01-01 12:00:00", "training ..."]
    scale, skipped_in, loss_sum, n_loss, g_last = 2.0 ** 32, 0, 0.0, 0, None
    for r in run(case)[:steps]:
        s = r["step"]
        sk = r["skipped"] or (s <= 16)            # Megatron's search from 2^32 takes 16 steps
        if case == "collapse" and s >= 300:
            sk = True
        if sk:
            skipped_in += 1
            scale /= 2
        else:
            loss_sum += r["loss"]
            n_loss += 1
            g_last = r["grad_norm"]
        if s % interval == 0:
            ts = "[%s] " % ("2024-01-01 12:%02d:%02d" % (s // 60, s % 60)) if stamped else ""
            parts = [f" {ts}iteration {s:8d}/{STEPS:8d} |", f" consumed samples: {s * 256:12d} |",
                     f" elapsed time per iteration (ms): {812.3:.1f} |", f" learning rate: {r['lr']:.6E} |",
                     f" global batch size: {256:5d} |"]
            if n_loss:
                parts.append(f" lm loss: {loss_sum / n_loss:.6E} |")
            parts.append(f" loss scale: {scale:.1f} |")
            if skipped_in < interval and g_last is not None:
                parts.append(f" grad norm: {g_last:.3f} |")
                parts.append(f" num zeros: {0.0:.1f} |")
            parts.append(f" number of skipped iterations: {skipped_in:3d} |")
            parts.append(f" number of nan iterations: {0:3d} |")
            lines.append("".join(parts))
            if s % 200 == 0:
                lines.append(f"saving checkpoint at iteration {s:7d} to /ckpt")
            skipped_in, loss_sum, n_loss = 0, 0.0, 0
    write(f"megatron/{name or case}.log", "\n".join(lines) + "\n")


# --- DeepSpeed: engine progress every `spp` steps, loss-scaler overflow lines, the min-scale error ---------
def deepspeed(case, spp):
    lines = ["[2024-01-01 12:00:00,000] [INFO] [config.py:1000:print] DeepSpeedEngine configuration:"]
    skipped, scale = 0, 65536
    for r in run(case):
        s = r["step"]
        ts = "[2024-01-01 12:%02d:%02d,%03d]" % (s // 60 % 60, s % 60, 0)
        if r["skipped"]:
            if case == "collapse" and scale <= 1:
                lines.append(f"{ts} [ERROR] Exception: Current loss scale already at minimum - cannot decrease scale "
                             "anymore. Exiting run.")
                break
            lines.append(f"{ts} [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping step. "
                         f"Attempted loss scale: {int(scale)}, reducing to {int(max(scale // 2, 1))}")
            scale = max(scale // 2, 1)
            skipped += 1
        if s % spp == 0:
            lines.append(f"{ts} [INFO] [logging.py:96:log_dist] [Rank 0] step={s}, skipped={skipped}, "
                         f"lr=[{r['lr']!r}], mom=[(0.9, 0.999)]")
    write(f"deepspeed/{case}.log", "\n".join(lines) + "\n")


# --- Lightning CSVLogger metrics.csv: lr rows (LearningRateMonitor) and loss rows apart, val rows ---------
def lightning(case):
    rows = ["epoch,lr-AdamW,step,train_loss,val_loss"]   # sorted header, sparse rows
    for r in run(case):
        s = r["step"]
        if s == 1 or s % 10 == 0:
            rows.append(f",{r['lr']!r},{s},,")
            rows.append(f"{s // 200},,{s},{r['loss']:.6f},")
        if s % 200 == 0:
            rows.append(f"{s // 200},,{s},,{r['loss'] + 0.1:.6f}")
    write(f"lightning/{case}/metrics.csv", "\n".join(rows) + "\n")


# --- W&B history export (HF Trainer integration keys) --------------------------------------------------------
def wandb(case):
    rows = ["_step,_runtime,_timestamp,train/loss,train/learning_rate,train/grad_norm,train/epoch,train/global_step"]
    k = 0
    for r in run(case):
        s = r["step"]
        if s == 1 or s % 10 == 0:
            rows.append(f"{k},{s * 0.5:.1f},{1704110400 + s * 0.5:.1f},{r['loss']:.6f},{r['lr']!r},"
                        f"{(r['grad_norm'] or 0):.6f},{s / 200:.4f},{s}")
            k += 1
    write(f"wandb/{case}.csv", "\n".join(rows) + "\n")


# --- TensorBoard: hand-made TFRecord + protobuf -----------------------------------------------------------
def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def masked(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def varint(n):
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        out += bytes([b | (0x80 if n else 0)])
        if not n:
            return out


def field(num, wire, payload):
    key = varint((num << 3) | wire)
    if wire == 2:
        return key + varint(len(payload)) + payload
    return key + payload


def event(wall, step, tag=None, value=None, tensor=False, version=None):
    e = field(1, 1, struct.pack("<d", wall)) + field(2, 0, varint(step))
    if version:
        return e + field(3, 2, version.encode())
    if tensor:   # TF2 style: rank-0 DT_FLOAT tensor in float_val
        t = field(1, 0, varint(1)) + field(5, 2, struct.pack("<f", value))
        v = field(1, 2, tag.encode()) + field(8, 2, t)
    else:
        v = field(1, 2, tag.encode()) + field(2, 5, struct.pack("<f", value))
    return e + field(5, 2, field(1, 2, v))


def frame(payload):
    n = struct.pack("<Q", len(payload))
    return n + struct.pack("<I", masked(crc32c(n))) + payload + struct.pack("<I", masked(crc32c(payload)))


def tensorboard(case, megatron_tags):
    tags = ("lm loss", "learning-rate", "grad-norm", "loss-scale") if megatron_tags else \
        ("train/loss", "train/lr", "train/grad_norm", "train/loss_scale")
    out = frame(event(1704110400.0, 0, version="brain.Event:2"))
    scale = 65536.0
    for r in run(case):
        s = r["step"]
        wall = 1704110400.0 + 0.5 * s
        if r["skipped"]:
            scale = max(scale / 2, 2.0 ** -10)
        g = r["grad_norm"] if r["grad_norm"] is not None else (0.0 if scale < 1 else 1.0)
        if case == "collapse" and s >= 300:
            g = 0.0 if scale < 1 else 1.0
        vals = [(tags[0], r["loss"]), (tags[1], r["lr"]), (tags[2], g), (tags[3], scale)]
        for i, (tag, v) in enumerate(vals):
            out += frame(event(wall, s, tag, v, tensor=(i == 1 and not megatron_tags)))
        if s % 200 == 0:
            out += frame(event(wall, s, "eval/loss", r["loss"] + 0.1))
    write(f"tensorboard/{case}/events.out.tfevents.1704110400.host.1.0", out, "wb")


if __name__ == "__main__":
    for c in ("healthy", "zero_grad_rank", "lr_zero"):
        flatline(c)
    for c in ("healthy", "lr_zero"):
        hf(c)
        lightning(c)
        wandb(c)
    megatron("healthy", stamped=True)
    megatron("lr_zero", stamped=False)
    megatron("collapse", stamped=True)
    megatron("healthy", stamped=True, interval=1, steps=120, name="warmup_every_iteration")
    deepspeed("healthy", spp=1)
    deepspeed("lr_zero", spp=10)
    deepspeed("collapse", spp=10)
    tensorboard("healthy", megatron_tags=False)
    tensorboard("lr_zero", megatron_tags=True)
    tensorboard("collapse", megatron_tags=False)
