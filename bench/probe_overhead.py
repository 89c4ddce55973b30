"""The probe's overhead on a step (docs/DESIGN.md §16): the example trainers' model (examples/trainers/
common.py TinyLM, batch 8 x 32 bytes) and transformers' tiny GPT-2 of hf_trainer.py, one process, one
CPU thread, AdamW. Two copies of the same job side by side in one process, one with the probe attached
(every step recorded at log_every 1; --log-every N records, and measures, one step in N), their steps
interleaved (the order swapped each step, so the machine's drift falls on both alike). Prints each
round's mean step time of each, then the median and spread (min..max) of the ratio on/off over the
rounds.

    PYTHONPATH=python .venv/bin/python bench/probe_overhead.py [--rounds 7] [--steps 200] [--log-every 1]

--ranks 2: the tests' configuration (probe_e2e_ddp_loop, examples/trainers/ddp_loop.py): TinyLM under
DistributedDataParallel on Gloo, one process a rank, one CPU thread each, batches of 8 from a
DistributedSampler through a BatchSampler (the probe's sampler wrapper on the probed copy), AdamW, the
gradients clipped to 1.0. Each rank trains two DDP copies side by side on the same process group, one
probed, their steps interleaved the same way on every rank; a step is timed from fetching its batch to
the update. Rank 0 prints.

--device cuda: the models and their batches on the GPU, each step timed to the end of its kernels (the
probe's among them: its GPU path takes the statistics and the batch hash on the device and reads them
back a step later from pinned memory); scripts/device-check.sh runs it.

--floor: the probed copy gets, instead of the probe, the least any probe taking the same statistics does
(`Floor`): the batch's XXH64 in a forward pre-hook, the gradients' pass in the optimizer's step pre-hook,
the update's pass (its snapshot kept) in the post-hook, stats.c's functions through ctypes with one
attribute read a tensor for the pointers, nothing checked, no record, no heartbeat, no fault: what the
probe's statistics cost by themselves on this machine (bench/README.md, "the floor").
"""
import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "trainers"))
from common import ByteWindows, TinyLM  # noqa: E402
from flatline_probe import attach  # noqa: E402


def tiny_gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    class Wrapped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = GPT2LMHeadModel(GPT2Config(vocab_size=256, n_positions=32, n_embd=64, n_layer=2, n_head=4))

        def forward(self, x, y):
            return self.m(input_ids=x, labels=x).loss
    return Wrapped()


CLOCK = time.perf_counter

PLAN = {"format": "flatline-plan/1", "name": "bench", "seed": 0, "world_size": 1, "steps": 1 << 30, "log_every": 1,
        "heartbeat_s": 0.5, "collective_timeout_s": 30, "precision": "fp32", "device": "cpu", "actions": [],
        "lr_factor": []}


class Job:
    """One model's training, with the probe attached or not; step() times one step (forward to update)."""

    def __init__(self, make_model, probe_on, data, log_every=1, device="cpu"):
        torch.manual_seed(0)
        self.device = torch.device(device)
        self.model = make_model().to(self.device)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=3e-3)
        if probe_on == "floor":
            self.probe = Floor(self.model, self.opt)
        else:
            self.probe = attach(tempfile.mkdtemp(prefix="probe-bench-"), self.model, self.opt,
                                plan=dict(PLAN, log_every=log_every)) if probe_on else None
        self.loader = torch.utils.data.DataLoader(data, batch_size=8, shuffle=False, drop_last=True)
        self.it = iter(self.loader)

    def batch(self):
        """The loader's next batch, its epoch started again at the end."""
        try:
            return next(self.it)
        except StopIteration:
            self.it = iter(self.loader)
            return next(self.it)

    def step(self):
        x, y = self.batch()
        cuda = self.device.type == "cuda"
        if cuda:  # (the copy is the batch's fetch, not the step's)
            x, y = x.to(self.device), y.to(self.device)
        t = CLOCK()
        loss = self.model(x, y)
        if self.probe:
            self.probe.loss(loss)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        if cuda:  # the step's kernels, the probe's among them, done
            torch.cuda.synchronize(self.device)
        return CLOCK() - t


class Floor:
    """--floor: the probe's native statistics and nothing else (above). Valid for this bench's jobs only:
    the parameters' pointers are taken once (nothing here moves them), the batch is (x, y), every
    gradient is a contiguous float32 CPU tensor; the values are computed and dropped."""

    def __init__(self, model, opt):
        import ctypes
        import struct
        from flatline_probe import native
        stats = native.load(say=True)
        if stats is None:
            sys.exit("--floor: the native statistics did not load (above)")
        lib, ptr = stats.lib, torch.Tensor.data_ptr
        params = [p for g in opt.param_groups for p in g["params"]]
        k = len(params)
        counts = struct.pack(f"{k}q", *[p.numel() for p in params])
        pptrs = struct.pack(f"{k}q", *map(ptr, params))
        self.snapshot = torch.cat([p.detach().reshape(-1) for p in params])
        snap = self.snapshot.data_ptr()
        nonzero, update_sq = ctypes.c_int64(), ctypes.c_double()
        self.out = []

        def batch(module, args, kwargs):
            if module.training:
                x, y = args
                self.out.append(lib.flatline_xxh64(2, struct.pack("2q", ptr(x), ptr(y)),
                                                   struct.pack("2q", x.nbytes, y.nbytes)))

        def grads(o, args, kwargs):
            gptrs = struct.pack(f"{k}q", *[ptr(p.grad) for p in params])
            self.out.append(lib.flatline_grad_stats(k, gptrs, counts, ctypes.byref(nonzero)))

        def update(o, args, kwargs):
            self.out.append(lib.flatline_update_stats(k, pptrs, counts, snap, ctypes.byref(update_sq)))
            if len(self.out) > 3000:
                self.out.clear()
        model.register_forward_pre_hook(batch, with_kwargs=True)
        opt.register_step_pre_hook(grads)
        opt.register_step_post_hook(update)

    def loss(self, loss):
        return loss

    def close(self):
        pass


class DDPJob(Job):
    """One DDP copy of the tests' TinyLM job on this rank, probed or not; step() times one step, its batch's
    fetch included (the probe's sampler wrapper hashes the sample ids there)."""

    def __init__(self, probe_on, data, log_every=1):
        from torch.nn.parallel import DistributedDataParallel as DDP
        from torch.utils.data import BatchSampler, DataLoader, DistributedSampler
        torch.manual_seed(0)
        self.model = DDP(TinyLM())
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=3e-3, weight_decay=0.1)
        batches = BatchSampler(DistributedSampler(data, shuffle=True, seed=7), 8, drop_last=True)
        self.probe = None
        if probe_on:
            ws = torch.distributed.get_world_size()
            self.probe = attach(tempfile.mkdtemp(prefix="probe-bench-"), self.model, self.opt, sampler=batches,
                                plan=dict(PLAN, log_every=log_every, world_size=ws))
            batches = self.probe.sampler
        self.loader = DataLoader(data, batch_sampler=batches)
        self.it = iter(self.loader)

    def step(self):
        t = CLOCK()
        x, y = self.batch()
        loss = self.model(x, y)
        if self.probe:
            self.probe.loss(loss)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        return CLOCK() - t


def side_by_side(name, off, on, a, say):
    """The two jobs' steps interleaved, the order swapped each step; say() prints each round's mean step
    times and their ratio, then the ratio's median and spread over the rounds."""
    for _ in range(20):  # warm-up
        off.step(), on.step()
    ratios = []
    for r in range(a.rounds):
        t_off, t_on = [], []
        for i in range(a.steps):  # interleaved, the order swapped each step: drift hits both alike
            if i % 2:
                t_off.append(off.step()), t_on.append(on.step())
            else:
                t_on.append(on.step()), t_off.append(off.step())
        # the mean: at log_every N the one step in N the probe measures is the cost, not the median step
        m_off, m_on = statistics.fmean(t_off), statistics.fmean(t_on)
        ratios.append(m_on / m_off)
        say(f"{name} round {r + 1}: mean step off {m_off * 1e3:.3f} ms  on {m_on * 1e3:.3f} ms  ratio {m_on / m_off:.4f}")
    on.probe.close()
    say(f"{name}, log_every {a.log_every}: probe on / off = {statistics.median(ratios):.4f} median over "
        f"{a.rounds} rounds (spread {min(ratios):.4f}..{max(ratios):.4f})")


def ranks_main(a):
    """--ranks N: this script again per rank, under torchrun's variables (localhost, Gloo)."""
    import socket
    import subprocess
    if "RANK" not in os.environ:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        env = dict(os.environ, WORLD_SIZE=str(a.ranks), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   OMP_NUM_THREADS="1")
        procs = [subprocess.Popen([sys.executable] + sys.argv, env=dict(env, RANK=str(r), LOCAL_RANK=str(r)))
                 for r in range(a.ranks)]
        codes = [p.wait() for p in procs]
        if any(codes):
            sys.exit(f"a rank failed: exit statuses {codes}")
        return
    torch.distributed.init_process_group("gloo")
    rank = torch.distributed.get_rank()
    data = ByteWindows()
    side_by_side(f"TinyLM DDP x{a.ranks} (Gloo)", DDPJob(False, data), DDPJob(True, data, a.log_every), a,
                 lambda line: print(line, flush=True) if rank == 0 else None)
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=200, help="steps of each job per round")
    ap.add_argument("--log-every", type=int, default=1, help="the plan's log_every (a step not logged is not measured)")
    ap.add_argument("--clock", choices=("wall", "thread"), default="wall",
                    help="wall: time.perf_counter; thread: this thread's CPU time (time.thread_time), which a "
                         "loaded machine descheduling the process does not inflate")
    ap.add_argument("--ranks", type=int, default=1,
                    help="1: the models in one process; N > 1: the tests' DDP job on N Gloo ranks (above)")
    ap.add_argument("--floor", action="store_true",
                    help="the probed copy runs only the probe's native statistics (Floor): the probe's floor")
    ap.add_argument("--device", default="cpu",
                    help="cpu, or cuda: the models and batches on the GPU, each step timed to its kernels' end "
                         "(torch.cuda.synchronize, in both jobs); the probe takes its GPU path (statistics "
                         "and the batch hash on the device, read back a step later from pinned memory)")
    a = ap.parse_args()
    global CLOCK
    CLOCK = time.perf_counter if a.clock == "wall" else time.thread_time
    torch.set_num_threads(1)
    if a.device == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda: no GPU here (torch.cuda.is_available() is False)")
    if a.device != "cpu" and (a.floor or a.ranks > 1):
        sys.exit("--device: one process, the probe itself (not with --floor, whose native passes are the CPU's, "
                 "or --ranks)")
    if a.ranks > 1:
        if a.floor:
            sys.exit("--floor: one process only (not with --ranks)")
        return ranks_main(a)
    data = ByteWindows()
    for name, make in (("TinyLM", TinyLM), ("tiny GPT-2", tiny_gpt2)):
        if make is tiny_gpt2 and importlib.util.find_spec("transformers") is None:
            print(f"{name}: skipped: this python has no transformers")
            continue
        on = "floor" if a.floor else True
        label = name + (" (floor)" if a.floor else "") + (f" on {a.device}" if a.device != "cpu" else "")
        side_by_side(label, Job(make, False, data, device=a.device), Job(make, on, data, a.log_every, a.device), a,
                     print)


if __name__ == "__main__":
    main()
