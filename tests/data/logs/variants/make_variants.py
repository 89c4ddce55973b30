#!/usr/bin/env python3
"""Writes tests/data/logs/variants/: the format variants found in real logs that the real-library
fixtures (../real/) cannot produce here. Megatron-LM and DeepSpeed cannot run on this machine, so their
lines are formatted exactly as their logging code formats them (each writer below cites the file,
commit and line it follows); the HF and Lightning variants are the schema and layout differences of
other versions of those libraries. Deterministic: rerun to regenerate; tests/readers/variants_test.cpp
asserts exact values from these files.
"""
import math
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))
PEAK, WARMUP = 3e-4, 50


def write(path, lines, crlf=False):
    path = os.path.join(HERE, path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", newline="") as f:
        f.write(("\r\n" if crlf else "\n").join(lines) + ("\r\n" if crlf else "\n"))


def lr_at(s, total, zero_from=None):
    if s <= WARMUP:
        return PEAK * (s - 1) / WARMUP if s >= 1 else 0.0
    if zero_from and s >= zero_from:
        return 0.0
    end = zero_from or total
    p = min(1.0, (s - WARMUP) / (end - WARMUP))
    return PEAK * 0.5 * (1 + math.cos(math.pi * p)) if not zero_from else PEAK * (1 - p)


def loss_at(s, rnd, floor=2.0):
    return floor + 3.0 * math.exp(-s / 150.0) + rnd.uniform(-0.03, 0.03)


def stamp(base_s, fmt="%Y-%m-%d %H:%M:%S"):
    import datetime
    return (datetime.datetime(2024, 1, 1) + datetime.timedelta(seconds=base_s)).strftime(fmt)


# --- Megatron-LM ---------------------------------------------------------------------------------------------
# 2021 (NVIDIA/Megatron-LM 6fd781891c, megatron/training.py training_log lines 542-572): no timestamp, lr
# "{:.3E}"; timers.log (megatron/global_vars.py lines 249-262) prints "time (ms) | name: x.xx | ..." after
# each log line; print_datetime (training.py lines 57-61) prints "[<string>] datetime: <%Y-%m-%d %H:%M:%S> ".
def megatron_2021():
    rnd = random.Random(21)
    lines = ["using world size: 8, data-parallel size: 8, tensor-model-parallel size: 1, pipeline-model-parallel size: 1 ",
             "------------------------ arguments ------------------------",
             "  micro_batch_size ................................ 4",
             "-------------------- end of arguments ---------------------",
             "[after dataloaders are built] datetime: 2021-05-01 08:00:00 ",
             "[before the start of training step] datetime: 2021-05-01 08:00:05 "]
    total = 600
    for s in range(10, total + 1, 10):
        lr = lr_at(s, total, zero_from=400)
        line = (f" iteration {s:8d}/{total:8d} | consumed samples: {s * 256:12d} | elapsed time per iteration (ms): "
                f"{1000.0:.1f} | learning rate: {lr:.3E} | global batch size: {256:5d} | lm loss: {loss_at(s, rnd):.6E} |"
                f" loss scale: {65536.0:.1f} | grad norm: {1.0 + rnd.uniform(0, 0.1):.3f} | number of skipped iterations:"
                f" {0:3d} | number of nan iterations: {0:3d} |")
        lines.append(line)
        lines.append(f"time (ms) | forward-compute: {412.05:.2f} | backward-compute: {587.31:.2f} | optimizer: {10.2:.2f}")
    lines.append("[after training is done] datetime: 2021-05-01 08:10:06 ")
    write("megatron/2021-format.log", lines)


# core_r0.8 (NVIDIA/Megatron-LM core_r0.8.0, megatron/training/training.py lines 829-875): the line opens with
# " [%Y-%m-%d %H:%M:%S]", lr "{:.6E}", "loss scale" always; an interval whose iterations were all skipped has
# no "lm loss" (the average over 0 advanced iterations is not > 0) and no "grad norm" (grad_norm is None
# for a skipped last iteration). fp16 with the initial scale 2^32: the first intervals skip every step.
def megatron_core_r08(name, bf16=False, hang=False):
    rnd = random.Random(8)
    lines = ["> building GPT model ...", "training ..."]
    scale, total, t = 1.0 if bf16 else 2.0 ** 32, 500, 0.0
    for s in range(5, (300 if hang else total) + 1, 5):
        skipped = 0 if bf16 else min(5, max(0, 17 - (s - 5)))   # the search: 16 halvings
        if not bf16:
            scale /= 2 ** skipped
        t += 5 * 0.81
        parts = [f" [{stamp(t)}] iteration {s:8d}/{total:8d} |", f" consumed samples: {s * 256:12d} |",
                 f" elapsed time per iteration (ms): {810.0:.1f} |", f" learning rate: {lr_at(s, total):.6E} |",
                 f" global batch size: {256:5d} |"]
        if skipped < 5:
            parts.append(f" lm loss: {loss_at(s, rnd):.6E} |")
        parts.append(f" loss scale: {scale:.1f} |")
        if skipped < 5:
            parts.append(f" grad norm: {1.1 + rnd.uniform(0, 0.1):.3f} |")
        parts += [f" number of skipped iterations: {skipped:3d} |", f" number of nan iterations: {0:3d} |"]
        lines.append("".join(parts))
        if s % 100 == 0:
            # evaluate_and_print_results: " validation loss at iteration N | lm loss value: X | lm loss PPL: Y |"
            v = loss_at(s, rnd) + 0.1
            lines += ["-" * 80, f" validation loss at iteration {s} | lm loss value: {v:.6E} | lm loss PPL: {math.exp(v):.6E} | ",
                      "-" * 80]
    if hang:
        # The job hangs in a collective at iteration ~300; 30 minutes later the NCCL watchdog (c10d
        # ProcessGroupNCCL.cpp WorkNCCL::checkTimeout: "[Rank r] Watchdog caught collective operation timeout:
        # <work> ran for <ms> milliseconds before timing out.") fires on every rank; torchrun prefixes ranks.
        for r in range(2):
            lines.append(f"[rank{r}]:[E0101 08:56:20.{r:06d}000 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught "
                         "collective operation timeout: WorkNCCL(SeqNum=1234, OpType=ALLREDUCE, NumelIn=1048576, "
                         "NumelOut=1048576, Timeout(ms)=1800000) ran for 1800053 milliseconds before timing out.")
    write(f"megatron/{name}.log", lines)


# core_r0.8 iteration lines 10..300 of a 1000-iteration run, 8.1 s apart (the runs that then stop): the
# lines and the time of the last.
def core_r08_to_300(rnd):
    lines, t = ["training ..."], 0.0
    for s in range(10, 310, 10):
        t += 8.1
        lines.append(f" [{stamp(t)}] iteration {s:8d}/{1000:8d} | consumed samples: {s * 256:12d} | elapsed time per "
                     f"iteration (ms): {810.0:.1f} | learning rate: {lr_at(s, 1000):.6E} | global batch size: {256:5d} | "
                     f"lm loss: {loss_at(s, rnd):.6E} | loss scale: {1.0:.1f} | grad norm: {1.2:.3f} | number of skipped "
                     f"iterations: {0:3d} | number of nan iterations: {0:3d} |")
    return lines, t


# A Megatron log whose iterations stop; half an hour later DeepSpeed's launcher (deepspeed/launcher/launch.py
# sigkill_handler, line 319: "Killing subprocess <pid>", through deepspeed/utils/logging.py's formatter
# "[%(asctime)s] [%(levelname)s] [%(filename)s:%(lineno)d:%(funcName)s] %(message)s") kills the ranks. No
# failure line from torch: the gap alone says the run stopped.
def megatron_gap():
    lines, t = core_r08_to_300(random.Random(9))
    lines.append(f"[{stamp(t + 1812, '%Y-%m-%d %H:%M:%S')},004] [INFO] [launch.py:319:sigkill_handler] Killing subprocess 4242")
    write("megatron/stopped-then-killed.log", lines)


# --- Megatron-DeepSpeed in pipeline mode, fp16 stuck at the scale floor ---------------------------------------
# microsoft/Megatron-DeepSpeed 8a132ced megatron/training.py: train_step lines 380-386 under args.deepspeed and
# pipeline parallelism return skipped_iter = 0, grad_norm = 0. and the loss as 'lm-loss'; training_log (lines
# 588-618) prints them, every log_interval (400 here: 6 lines in 2500 steps). DeepSpeed's engine
# (microsoft/DeepSpeed 38327e07 deepspeed/runtime/engine.py _report_progress, lines 2486-2489, every
# steps_per_print = 10) prints the true skipped counter; its pipeline engine (runtime/pipe/engine.py line 401)
# "steps: N loss: X iter time (s): T samples/sec: S"; the loss scaler (runtime/fp16/loss_scaler.py
# update_scale, lines 171-190, raise_error_at_min_scale off) logs each overflow at the floor of 1 as
# "Attempted loss scale: 1, reducing to 1".
def megatron_deepspeed_pipeline():
    rnd = random.Random(11)
    lines, skipped, scale, t = ["[2024-01-01 00:00:00,000] [INFO] [config.py:1000:print] DeepSpeedEngine configuration:"], 0, 2.0 ** 16, 0.0
    for s in range(1, 2501):
        t += 0.5
        over = s <= 16 or (s > 400 and rnd.random() < 0.75)     # the search, then overflow at the floor
        if over:
            nxt = max(scale / 2, 1.0)
            lines.append(f"[{stamp(t)},000] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank 0 "
                         f"Skipping step. Attempted loss scale: {int(scale)}, reducing to {int(nxt)}")
            scale, skipped = nxt, skipped + 1
        if s % 10 == 0:
            lines.append(f"[{stamp(t)},000] [INFO] [logging.py:96:log_dist] [Rank 0] step={s}, skipped={skipped}, "
                         f"lr=[{lr_at(s, 2500)!r}], mom=[(0.9, 0.95)]")
            lines.append(f"steps: {s} loss: {loss_at(min(s, 600), rnd, floor=2.4):0.4f} iter time (s): 0.500 samples/sec: 512.000")
        if s % 400 == 0:
            lines.append(f" iteration {s:8d}/{2500:8d} | consumed samples: {s * 256:12d} | consumed tokens: {s * 524288:12d} |"
                         f" elapsed time per iteration (ms): {500.0:.1f} | learning rate: {lr_at(s, 2500):.3E} | global batch "
                         f"size: {256:5d} | lm-loss: {loss_at(min(s, 600), rnd, floor=2.4):.6E} | loss scale: {scale:.1f} |"
                         f" grad norm: {0.0:.3f} | num zeros: {0.0:.1f} | actual seqlen: {2048:5d} | number of skipped "
                         f"iterations: {0:3d} | number of nan iterations: {0:3d} | samples per second: {512.0:.3f} | "
                         f"TFLOPs: {41.20:.2f} |")
    write("megatron-deepspeed/pipeline-fp16-floor.log", lines)


# Megatron-DeepSpeed fp16, logged sparsely (log_interval and DeepSpeed's steps_per_print 500: 5 lines each in
# 2500 steps, the fused optimizer's per-overflow lines not kept): the scale falls to the floor of 1 after
# step 1000 and three steps in four overflow there. Only DeepSpeed's cumulative skipped= counter
# (engine.py _report_progress, "step={global_steps}, skipped={skipped_steps}") and the last overflow's
# "Attempted loss scale: 1, reducing to 1" (loss_scaler.py update_scale, through log_dist) show it.
# The healthy twin: the same run whose scaler settles (one overflow per 1000-step growth window).
def megatron_deepspeed_sparse(name, collapse):
    rnd = random.Random(12)
    lines, skipped, t = ["[2024-01-01 00:00:00,000] [INFO] [config.py:1000:print] DeepSpeedEngine configuration:"], 0, 0.0
    scale = 2.0 ** 16
    for s in range(1, 2501):
        t += 1.2
        if s <= 8:
            skipped, scale = skipped + 1, scale / 2           # the initial search from 2^16 to 256
        elif collapse and s > 1000:
            scale = 1.0
            if rnd.random() < 0.75:
                skipped += 1
        elif s % 1000 == 0:
            skipped += 1                                     # a growth that overflowed, once per window
        if s % 500 == 0:
            if collapse and s == 2500:
                lines.append(f"[{stamp(t)},556] [INFO] [logging.py:96:log_dist] [Rank 0] Overflow detected. Skipping step. "
                             "Attempted loss scale: 1, reducing to 1")
            lines.append(f"[{stamp(t)},556] [INFO] [logging.py:96:log_dist] [Rank 0] step={s}, skipped={skipped}, "
                         f"lr=[{lr_at(s, 2500)!r}, {lr_at(s, 2500)!r}], mom=[(0.9, 0.95), (0.9, 0.95)]")
            loss = loss_at(min(s, 1000), rnd, floor=2.4) + (0.0004 * (s - 1000) if collapse and s > 1000 else 0.0)
            lines.append(f" iteration {s:8d}/{2500:8d} | consumed samples: {s * 32:12d} | elapsed time per iteration (ms): "
                         f"{1200.0:.1f} | learning rate: {lr_at(s, 2500):.3E} | global batch size: {32:5d} | lm loss: "
                         f"{loss:.6E} | loss scale: {scale:.1f} | grad norm: {2.265:.3f} | number of skipped iterations: "
                         f"{0:3d} | number of nan iterations: {0:3d} |")
    write(f"megatron-deepspeed/{name}.log", lines)


# DeepSpeed fp16 on 4 ranks through its launcher: the fused optimizer's overflow lines ("Grad overflow on
# iteration N" after the logger's header line, "Reducing dynamic loss scale from X to Y"; fp16/fused_optimizer.py
# _update_scale) are printed by every rank, unprefixed and interleaved; log_dist's "Overflow detected. Skipping
# step." only by rank 0. A healthy run: the initial search from 2^16 to 128, then the scale grows after each
# window of 50 steps and the growth overflows once.
def deepspeed_rank_copies():
    lines, skipped, scale, window = [], 0, 65536.0, 0
    for s in range(1, 301):
        ts = f"[{stamp(s)},502]"
        over = s <= 9 or window == 50
        if over:
            nxt = scale / 2
            for r in range(4):
                lines += [f"{ts} [INFO] [fused_optimizer.py:362:_update_scale] ", f"Grad overflow on iteration {s}"]
            for r in range(4):
                lines.append(f"{ts} [INFO] [fused_optimizer.py:363:_update_scale] Reducing dynamic loss scale from {scale} to {nxt}")
            lines.append(f"{ts} [INFO] [logging.py:96:log_dist] [Rank 0] Overflow detected. Skipping step. Attempted loss scale: "
                         f"{scale}, reducing to {nxt}")
            scale, skipped, window = nxt, skipped + 1, 0
        else:
            window += 1
            if window == 50:
                for r in range(4):
                    lines.append(f"{ts} [INFO] [fused_optimizer.py:371:_update_scale] Increasing dynamic loss scale from {scale} to {scale * 2}")
                scale *= 2
        if s % 10 == 0:
            lines.append(f"{ts} [INFO] [logging.py:96:log_dist] [Rank 0] step={s}, skipped={skipped}, lr=[5e-05, 5e-05], "
                         "mom=[(0.9, 0.95), (0.9, 0.95)]")
    write("deepspeed/rank-copies-healthy.log", lines)


# The tail of a Megatron log (2021 format: no timestamps on its lines) whose job hung after iteration 4000 and
# its evaluation: a job monitor goes on writing timestamped lines for six hours, and no iteration comes. The
# iteration line has no clock, so only the monitor lines' own span says how long nothing advanced.
def megatron_monitor_hang():
    rnd = random.Random(13)
    lines = [f" iteration {4000:8d}/{20000:8d} | consumed samples: {4000 * 256:12d} | elapsed time per iteration (ms): "
             f"{1000.0:.1f} | learning rate: {2.5e-4:.3E} | global batch size: {256:5d} | lm loss: {loss_at(4000, rnd):.6E} |"
             f" loss scale: {65536.0:.1f} | grad norm: {1.05:.3f} | number of skipped iterations: {0:3d} | number of nan "
             f"iterations: {0:3d} |",
             "-" * 80, f" validation loss at iteration 4000 | lm loss value: {2.1:.6E} | lm loss PPL: {math.exp(2.1):.6E} | ",
             "-" * 80]
    for h in range(0, 6 * 3600 + 1, 1800):
        lines.append(f"{stamp(36000 + h)} job-monitor: job 4242 RUNNING on 8 nodes, log last written {h // 60} min ago")
    write("megatron/monitor-after-hang.log", lines)


# Slurm ends a job that stopped advancing: core_r0.8 iterations to 300, then nothing until slurmstepd's
# "*** JOB <id> ON <node> CANCELLED AT <time> DUE TO TIME LIMIT ***" (src/slurmd/slurmstepd/req.c, the time
# as slurm_make_time_str's default %Y-%m-%dT%H:%M:%S) four hours later.
def megatron_slurm_time_limit():
    lines, t = core_r08_to_300(random.Random(14))
    lines.append(f"slurmstepd: error: *** JOB 4242 ON node01 CANCELLED AT {stamp(t + 4 * 3600, '%Y-%m-%dT%H:%M:%S')} DUE TO TIME LIMIT ***")
    write("megatron/slurm-time-limit-after-hang.log", lines)


# --- DeepSpeed ----------------------------------------------------------------------------------------------------
# The forms of an overflow, an old progress line, pdsh prefixes, lr per parameter group and the loss from the
# user's script, in one healthy log with an initial scale search:
#  - "[deepscale] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: X, reducing to Y" (v0.2.0
#    deepspeed/pt/deepspeed_zero_optimizer.py line 1084);
#  - "Grad overflow on iteration N" + "Reducing dynamic loss scale from X to Y" (fp16/fused_optimizer.py
#    _update_scale, lines 385-393, verbose) then "Overflow detected. Skipping step. Attempted loss scale: X,
#    reducing to Y" (step, lines 264-267): ONE overflow;
#  - "... Attempted loss scale: X, but hysteresis is 2. Reducing hysteresis to 1" (loss_scaler.py line 189);
#  - "rank:0 step=S, skipped=K, lr=[a, b], mom=[[0.9, 0.999], [0.9, 0.999]]" (2020 deepspeed/pt/deepspeed_light.py
#    _report_progress, 7a9fbe67a line 710), lr per parameter group;
#  - every line prefixed by pdsh's "worker-0: " (deepspeed/launcher/multinode_runner.py PDSHRunner);
#  - the loss from HF Trainer's printed dicts ({'loss': ..., 'learning_rate': ...}).
def deepspeed_variants():
    rnd = random.Random(3)
    w = "worker-0: "
    lines, skipped, scale = [w + "[2024-01-01 00:00:00,000] [INFO] [config.py:1000:print] DeepSpeedEngine configuration:"], 0, 65536
    for s in range(1, 301):
        ts = stamp(s)
        if s == 1:
            lines.append(f"{w}[deepscale] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: {scale}, reducing to {scale // 2}")
            scale //= 2
            skipped += 1
        elif s == 2:
            lines += [f"{w}[{ts},000] [INFO] [fused_optimizer.py:392:_update_scale] ", f"{w}Grad overflow on iteration 2",
                      f"{w}[{ts},000] [INFO] [fused_optimizer.py:393:_update_scale] Reducing dynamic loss scale from {float(scale)} to {scale / 2}",
                      f"{w}[{ts},000] [INFO] [logging.py:96:log_dist] [Rank 0] Overflow detected. Skipping step. Attempted loss scale: {float(scale)}, reducing to {scale / 2}"]
            scale //= 2
            skipped += 1
        elif s == 3:
            lines.append(f"{w}[{ts},000] [INFO] [loss_scaler.py:189:update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping "
                         f"step. Attempted loss scale: {scale}, but hysteresis is 2. Reducing hysteresis to 1")
            skipped += 1
        if s % 10 == 0:
            lr = lr_at(s, 300)
            lines.append(f"{w}[{ts},000] [INFO] [deepspeed_light.py:710:_report_progress] rank:0 step={s}, "
                         f"skipped={skipped}, lr=[{lr!r}, {lr!r}], mom=[[0.9, 0.999], [0.9, 0.999]]")
            lines.append(f"{w}{{'loss': {loss_at(s, rnd):.4f}, 'learning_rate': {lr!r}, 'epoch': {s / 100:.2f}}}")
    write("deepspeed/variants-healthy.log", lines)


# The scale reaches its floor (min_loss_scale 1, raise_error_at_min_scale False) and every step overflows:
# "Attempted loss scale: 1, reducing to 1" (loss_scaler.py update_scale lines 178-182).
def deepspeed_floor():
    lines, skipped, scale = [], 0, 4096
    for s in range(1, 201):
        ts = f"[{stamp(s)},000]"
        if s > 100:
            nxt = max(scale // 2, 1)
            lines.append(f"{ts} [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping step. "
                         f"Attempted loss scale: {scale}, reducing to {nxt}")
            scale, skipped = nxt, skipped + 1
        if s % 10 == 0:
            lines.append(f"{ts} [INFO] [logging.py:96:log_dist] [Rank 0] step={s}, skipped={skipped}, lr=[0.0003], "
                         f"mom=[(0.9, 0.999)]")
    write("deepspeed/scale-floor-every-step.log", lines)


# min_loss_scale 0.0 in the fp16 config: the fused optimizer backs off past 1 (fused_optimizer.py _update_scale
# max(cur_scale / scale_factor, min_loss_scale)) and the loss scaler prints int() of the scale: 0.
def deepspeed_min_zero():
    lines, scale = [], 8.0
    for s in range(1, 121):
        ts = f"[{stamp(s)},000]"
        if s > 60:
            lines.append(f"{ts} [INFO] [logging.py:96:log_dist] [Rank 0] Overflow detected. Skipping step. Attempted loss "
                         f"scale: {scale}, reducing to {scale / 2}")
            scale /= 2
        if s % 10 == 0:
            lines.append(f"{ts} [INFO] [logging.py:96:log_dist] [Rank 0] step={s}, skipped={max(0, s - 60)}, "
                         f"lr=[0.0003], mom=[(0.9, 0.999)]")
    write("deepspeed/min-scale-zero.log", lines)


# A short run that ends on the minimum-scale error right after the scale reached it (loss_scaler.py line 175-176:
# "Current loss scale already at minimum - cannot decrease scale anymore. Exiting run."); the loss from the
# PyTorch tutorial's print "[epoch, batch] loss: x.xxx".
def deepspeed_min_error():
    rnd = random.Random(5)
    lines, scale = [], 2
    for s in range(1, 101):
        ts = f"[{stamp(s)},000]"
        if s == 100:
            lines.append(f"{ts} [ERROR] [launch.py:321:sigkill_handler] Exception: Current loss scale already at minimum - "
                         f"cannot decrease scale anymore. Exiting run.")
            break
        if s == 99:
            lines.append(f"{ts} [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping step. "
                         f"Attempted loss scale: {scale}, reducing to 1")
        if s % 10 == 0:
            lines.append(f"{ts} [INFO] [logging.py:96:log_dist] [Rank 0] step={s}, skipped=0, lr=[0.001], mom=[(0.9, 0.999)]")
            lines.append(f"[{1 + s // 50}, {s % 50 * 100 + 100:5d}] loss: {loss_at(s, rnd, floor=1.0):.3f}")
    write("deepspeed/min-scale-error.log", lines)


# --- torch.distributed.elastic failure summary (errors/__init__.py ChildFailedError.format_msg) ---------------
def elastic_summary():
    rnd = random.Random(6)
    lines = []
    for s in range(1, 81):
        lines.append(f"{{'loss': '{loss_at(s * 5, rnd):.4g}', 'grad_norm': '1.2', 'learning_rate': '0.0003', 'epoch': '{s / 80:.3g}'}}")
    lines += ["[rank1]:[E0101 10:00:00.000000000 ProcessGroupNCCL.cpp:1895] [PG ID 0 PG GUID 0(default_pg) Rank 1] "
              "Process group watchdog thread terminated with exception: CUDA error: an illegal memory access was encountered",
              "W0101 10:00:01.000000 4242 torch/distributed/elastic/multiprocessing/api.py:897] Sending process 4244 closing signal SIGTERM",
              "E0101 10:00:01.500000 4242 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -6) "
              "local_rank: 1 (pid: 4245) of binary: /usr/bin/python3",
              "Traceback (most recent call last):", "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
              "============================================================", "train.py FAILED",
              "------------------------------------------------------------", "Failures:", "  <NO_OTHER_FAILURES>",
              "------------------------------------------------------------", "Root Cause (first observed failure):",
              "[0]:", "  time      : 2024-01-01_10:00:01", "  host      : node-3", "  rank      : 1 (local_rank: 1)",
              "  exitcode  : -6 (pid: 4245)", "  error_file: <N/A>", "  traceback : Signal 6 (SIGABRT) received by PID 4245",
              "============================================================"]
    write("console/elastic-summary.log", lines)


# --- HF trainer_state.json -----------------------------------------------------------------------------------
# CRLF (saved on Windows), a trainer.predict entry without "step" (predict_*), TRL's extra fields
# (rewards/chosen, logps/rejected, ...), bare NaN, lr 0.0 at the first warmup step and at the last step of
# a linear schedule (transformers trainer_pt_utils / optimization.py get_linear_schedule_with_warmup).
def hf_variants():
    rnd = random.Random(7)
    total, hist = 400, []
    for s in [1] + list(range(10, total + 1, 10)):
        lr = 0.0 if s == 1 else PEAK * (1 - (s - 20) / (total - 20)) if s > 20 else PEAK * s / 20
        e = {"epoch": round(s / 200, 4), "grad_norm": float("nan") if s == 200 else round(1 + rnd.uniform(0, 0.2), 4),
             "learning_rate": max(0.0, lr), "loss": round(loss_at(s, rnd), 4), "step": s,
             "rewards/chosen": round(rnd.uniform(-1, 1), 4), "rewards/margins": 0.5, "logps/rejected": -120.5}
        hist.append(e)
    hist.append({"predict_loss": 2.1, "predict_runtime": 3.2, "predict_samples_per_second": 100.0})
    hist.append({"epoch": 2.0, "step": total, "total_flos": 1e15, "train_loss": 2.4, "train_runtime": 80.0})
    import json
    text = json.dumps({"best_metric": None, "epoch": 2.0, "global_step": total, "log_history": hist,
                       "logging_steps": 10, "max_steps": total, "num_train_epochs": 2, "train_batch_size": 16},
                      indent=2, sort_keys=True)
    write("hf/predict-trl-crlf/trainer_state.json", text.split("\n"), crlf=True)
    # transformers 4.2x: no grad_norm, no eval_steps / logging_steps / train_batch_size, epochs only
    old = [{"epoch": round(s / 200, 2), "learning_rate": PEAK if s < 300 else 0.0, "loss": round(loss_at(s, rnd), 4),
            "step": s} for s in range(10, 501, 10)]
    write("hf/old-schema/trainer_state.json", json.dumps({"epoch": 2.5, "global_step": 500, "log_history": old,
                                                           "max_steps": 1000}, indent=2).split("\n"))


# --- Lightning metrics.csv ------------------------------------------------------------------------------------
# lightning/pytorch/loggers/csv_logs.py ExperimentWriter: step-first or metrics-first header orders across
# versions, CRLF when written on Windows, on_step/on_epoch metrics as train_loss_step / train_loss_epoch,
# sparse rows, and no lr column when no LearningRateMonitor is attached.
def lightning_variants():
    rnd = random.Random(10)
    rows = ["step,epoch,train_loss_step,train_loss_epoch,val_loss"]
    for s in range(1, 301):
        if s % 4 == 0:
            rows.append(f"{s},{s // 100},{loss_at(s, rnd):.6f},,")
        if s % 100 == 0:
            rows.append(f"{s},{s // 100 - 1},,{loss_at(s, rnd) + 0.05:.6f},")
            rows.append(f"{s},{s // 100 - 1},,,{loss_at(s, rnd) + 0.1:.6f}")
    write("lightning/crlf-step-first-no-lr/metrics.csv", rows, crlf=True)
    rows = ["train_loss,lr-SGD,epoch,step"]
    for s in range(1, 401):
        if s % 5 == 0:
            rows.append(f"{loss_at(s, rnd):.6f},,{s // 100},{s}")
            rows.append(f",{0.1 if s < 250 else 0.0!r},,{s}")
    write("lightning/lf-metrics-first/metrics.csv", rows)


if __name__ == "__main__":
    megatron_2021()
    megatron_core_r08("core_r0.8-fp16-search")
    megatron_core_r08("core_r0.8-bf16", bf16=True)
    megatron_core_r08("core_r0.8-nccl-watchdog", bf16=True, hang=True)
    megatron_gap()
    megatron_deepspeed_pipeline()
    megatron_deepspeed_sparse("sparse-fp16-floor", collapse=True)
    megatron_deepspeed_sparse("sparse-fp16-healthy", collapse=False)
    deepspeed_rank_copies()
    megatron_monitor_hang()
    megatron_slurm_time_limit()
    deepspeed_variants()
    deepspeed_floor()
    deepspeed_min_zero()
    deepspeed_min_error()
    elastic_summary()
    hf_variants()
    lightning_variants()
