"""The probe: flatline's telemetry from a real PyTorch job, and the scenario's faults carried out in it
(docs/DESIGN.md §16).

Per step and rank it records (docs/DESIGN.md §3): step (optimizer steps attempted, the global step) and
opt_step (updates applied); loss (this rank's, from `probe.loss()` or the framework) and lr (param
group 0's, as the update used it); grad_norm (L2 of the averaged gradients after the all-reduce, unscaled,
before clipping: DDP's communication hook sees them; without DDP, at the optimizer's step),
local_grad_norm (this rank's gradients before the all-reduce, unscaled), grad_zero_frac, param_norm and
update_norm (L2 of the parameters after the update, and of what the update changed); loss_scale,
overflow and skipped from torch.amp.GradScaler (an update GradScaler skipped never reaches the
optimizer's step hooks); batch_hash (BLAKE2b-64 of the batch's sample ids from the sampler wrapper, or
XXH64 of the batch's tensors' bytes in one native call, BLAKE2b-64 of them without the native library;
only equality within a run matters to the detectors); heartbeats from a
thread with the phase; run_start, run_end, checkpoint_save, error and interrupted events.

Scalars are read from the device once per step, after the step's own work, by the probe's recorder
thread (telemetry.Recorder), which also fills, encodes and writes the record; on CUDA from a pinned copy,
so the probe adds no device synchronisation of its own (GradScaler's is its own).

The faults: the plan (FLATLINE_PLAN, faults/plan_json.h) says, per step and rank, what RunPlan decided;
the probe carries it out where the job's own objects are:
  zero_grads, skip_backward   the rank's buckets are zeroed in DDP's communication hook before the
                              all-reduce (under DDP every rank must join each bucket's all-reduce, so a
                              skipped backward is sent as zeros too: what its peers receive is the same)
  block_s                     the rank blocks in the hook before its first bucket's all-reduce (a hang;
                              its heartbeats go on, phase `collective`)
  data_block_s                the rank blocks fetching its batch (phase `data`)
  inject_inf                  an inf in the rank's gradients before the all-reduce: GradScaler skips
  max_loss_scale              GradScaler's scale clamped after its update()
  batch_index                 the step trains an earlier batch: the sampler wrapper yields its indices
                              again without moving on; without one, the batch's tensors are overwritten
                              in place by that batch's (kept from when it was trained)
  scheduler_frozen            param groups' lr held at what it was when the freeze began
  freeze_logging              the record repeats the step and loss it showed last
  lr_factor                   the job's lr times the planned schedule's over the healthy one's

A restart (the plan's checkpoint_every, restart_at and resume): the probe asks the job for a checkpoint
after every checkpoint_every steps (`checkpoint_due()`; the transformers and Lightning callbacks save
one themselves), and before step restart_at + 1 writes stop_for_restart and ends the process with exit
status 3 (EXIT_RESTART) once every rank is there; flatline starts the job again with FLATLINE_RESUME=1,
the job resumes from its last checkpoint and tells the probe (`checkpoint_loaded`), which then carries
out what the faults change about that resume:
  restore_sampler false       the loader starts its epoch over: the sampler wrapper does not skip the
                              batches of the epoch already trained (it does on a healthy resume);
                              transformers' Trainer gets ignore_data_skip; Lightning's callback drops
                              the loader's state from the checkpoint it restores
  finish_scheduler            the scheduler of a finished schedule: the lr is 0 from then on
"""
import atexit
import contextlib
import hashlib
import math
import os
import signal
import sys
import threading
import time

import torch

from .batches import ReplaySampler, bytes_of, hashed_tensors, tensors_of
from . import native
from .norms import FlatCopy, UpdateNorms, device_hash_words, hash_of_words, nonzeros, nonzeros_, parts, scratch_dtype, \
    sq_norm
from .plan import EXIT_RESTART, PlanError, load_plan, resuming
from .telemetry import FLUSH_S, Heartbeat, Recorder, Writer, finite

# What a step's statistics are read as: squared norms and counts are summed over buffers and buckets.
_SUMMED = ("grad_sq", "local_sq", "nonzero", "param_sq", "update_sq")


def _ddp_of(module):
    """The DistributedDataParallel that wraps `module` (HF and Lightning wrap it themselves), or None."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    if isinstance(module, DDP):
        return module
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return None  # no process group, no DDP
    import gc
    for o in gc.get_objects():
        if isinstance(o, DDP):
            inner = o.module
            while True:
                if inner is module:
                    return o
                nxt = getattr(inner, "module", None) or getattr(inner, "_forward_module", None)
                if nxt is None or nxt is inner:
                    break
                inner = nxt
    return None


def _on_stack(frame):
    """Whether `frame` is the caller's or one of its callers'."""
    f = sys._getframe(1)
    while f is not None:
        if f is frame:
            return True
        f = f.f_back
    return False


class Probe:
    def __init__(self, run_dir=None, model=None, optimizer=None, scaler=None, sampler=None, *, plan=None,
                 rank=None, world_size=None, hooks=True):
        self.rank = int(os.environ.get("RANK", 0)) if rank is None else rank
        self.world_size = int(os.environ.get("WORLD_SIZE", 1)) if world_size is None else world_size
        self.run_dir = os.environ.get("FLATLINE_RUN_DIR") or run_dir
        if not self.run_dir:
            raise PlanError("no run directory: give run_dir, or run under flatline (FLATLINE_RUN_DIR)")
        self.plan = plan if plan is not None else load_plan()
        self.t0 = float(os.environ.get("FLATLINE_RUN_T0") or time.time())
        self._by_step, self._lr_factor, self._replayed = {}, {}, set()
        self.steps = None
        self._checkpoint_every, self._restart_at, self._resume_plan = 0, -1, None
        self.resumed = resuming()  # this process was started to resume
        self.drops_sampler_state = False  # the resume does not restore the loader's position (a fault)
        self._lr_zero_after = None  # a finished schedule restored at the resume: lr 0 after this step
        self._resume_skip = None    # the step resumed from, until the sampler wrapper has used it
        self._checkpoint_asked = 0  # the last step checkpoint_due() said yes for
        if self.plan:
            self._read_plan()
        self.model, self.optimizer, self.scaler = model, optimizer, scaler
        self.writer = Writer(os.path.join(self.run_dir, "telemetry", f"rank-{self.rank}.jsonl"))
        self._lock = threading.Lock()
        self.step = 0            # last completed step
        self._step_base = 0
        self.opt_step = 0
        self.cur = None          # the step in progress, once begun
        self.phase = "data"
        self._act = {}
        self._ids_by_step = {}
        self._kept_batches = {}
        self._logged = (0, None)  # what the logger showed last (a frozen logger keeps it)
        self._last_end = time.monotonic()
        self._closed = False
        self._pid = os.getpid()  # a process forked from this one writes nothing (_forked)
        self._in_write = False   # the main thread is in the writer (a signal's handler waits: _writing)
        self._signalled = None   # a signal that came then: (signum, why), handled once the write is done
        self._ddp = None
        self._lr_saved = None
        self._lr_pinned = None
        self._manual_before_update = False
        self._native = native.load(say=self.rank == 0)  # one pass a statistic on CPU (None: torch calls)
        self._grads = FlatCopy()  # the gradients, where no DDP hook sees them (no DDP) and not native
        self._update = UpdateNorms(self._native)  # param_sq and update_sq, from a snapshot before the update
        self._scratch = {}       # per DDP bucket: a buffer for its nonzero count (the torch calls' path)
        self._logging = True     # the step in progress is one the log keeps (log_every)
        self._ends_by_callback = False  # a framework's callback ends each step (HF, Lightning)
        self._opt_depth = 0      # optimizer step() calls in progress (a subclass's step() calls its base's)
        self._opt_outer = None   # the frame of torch's wrapper around the outermost one, while it runs
        self._reset_step_stats()
        self.recorder = Recorder(FLUSH_S, then=self.writer.flush)
        self._event("run_start", f"flatline probe, torch {torch.__version__}, world_size {self.world_size}")
        self.heartbeat = Heartbeat(self, self.plan["heartbeat_s"] if self.plan else 0.5)
        atexit.register(self.close)
        self._install_exit_handlers()
        os.register_at_fork(after_in_child=self._forked)
        self.sampler = None
        if sampler is not None:
            self.sampler = self.wrap_batch_sampler(sampler)
        if hooks and optimizer is not None:
            self.watch_optimizer(optimizer)
        if hooks and scaler is not None:
            self.watch_scaler(scaler)
        if hooks and model is not None:
            self.watch_model(model)

    # ---- the plan ------------------------------------------------------------------------------
    def _read_plan(self):
        p = self.plan
        if p["world_size"] != self.world_size:
            raise PlanError(f"the plan is for world_size {p['world_size']}, this job has WORLD_SIZE {self.world_size}")
        self.steps = p["steps"]
        for a in p["actions"]:
            if a["rank"] != self.rank:
                continue
            fields = {k: v for k, v in a.items() if k not in ("rank", "from", "to")}
            if "slowdown" in fields:
                raise PlanError("straggler/slow_rank: not carried out by the probe (the job's own step time is "
                                "what it is); flatline's own trainer runs it")
            for s in range(a["from"], a["to"] + 1):
                self._by_step[s] = fields
            if "batch_index" in fields:
                self._replayed.add(fields["batch_index"])
        self._lr_factor = {int(s): f for s, f in p["lr_factor"]}
        self._fp16 = p["precision"] == "fp16"
        self._checkpoint_every = int(p.get("checkpoint_every", 0))
        self._restart_at = int(p.get("restart_at", -1))
        self._resume_plan = p.get("resume")

    def _lr_factor_at(self, step):
        if self._lr_zero_after is not None and step > self._lr_zero_after:
            return 0.0
        return self._lr_factor.get(step, 1.0)

    def _acts(self, step):
        return self._by_step.get(step, {})

    # ---- events and heartbeats -----------------------------------------------------------------
    def _t(self):
        return time.time() - self.t0

    def _event(self, name, detail=None, step=None):
        r = {"kind": "event", "rank": self.rank, "t": self._t(), "step": self.step if step is None else step,
             "name": name}
        if detail:
            r["detail"] = detail
        self.recorder.put(self.writer.post, r, True)
        with self._writing():
            self.recorder.drain()  # written at once, behind the records before it

    @contextlib.contextmanager
    def _writing(self):
        """Around the training's thread's own writes (events, the end): a SIGTERM/SIGINT/SIGHUP that comes
        meanwhile runs its handler in this thread, which holds the writer's lock and may have a record half
        taken off the recorder's queue; the handler then leaves the signal here, handled at the end."""
        if self._in_write or threading.current_thread() is not threading.main_thread():
            yield
            return
        self._in_write = True
        try:
            yield
        finally:
            self._in_write = False
            if self._signalled is not None:
                self._interrupted(*self._signalled)

    def _forked(self):
        """In a process forked from the job's (a DataLoader worker, os.fork()): the probe is the parent's.
        Nothing is written from here (its exit, an exception or a signal would write the parent's queued
        records again, and a run_end or interrupted of a process that is not the rank); the locks the
        parent's threads held at the fork are never touched."""
        self._closed = True
        self.recorder.disown()
        self.writer.disown()

    def _heartbeat(self):
        if self._closed:
            return
        self.writer.post({"kind": "heartbeat", "rank": self.rank, "t": self._t(),
                          "step": self.cur if self.cur is not None else self.step + 1, "phase": self.phase},
                         now=True)

    def checkpoint_saved(self, detail=None):
        self._event("checkpoint_save", detail)

    def checkpoint_loaded(self, step, detail=None, opt_step=None):
        """The job resumed from its checkpoint of global step `step` (opt_step: its updates applied, when it
        counts skipped fp16 steps apart; else the step). In a process flatline started to resume a
        scenario's restart, what the faults change about the resume is carried out from here on."""
        self.step = self._step_base = int(step)
        self.opt_step = int(step) if opt_step is None else int(opt_step)
        self._event("checkpoint_load", detail)
        self._event("resume", f"from checkpoint step {step}")
        self._resume_skip = self.step
        if self.resumed and self._resume_plan:
            self.drops_sampler_state = not self._resume_plan["restore_sampler"]
            if self._resume_plan["finish_scheduler"]:
                self._lr_zero_after = self.step

    def checkpoint_due(self):
        """True once after each step the plan wants a checkpoint after (a multiple of its checkpoint_every):
        the job saves one then, and says so with checkpoint_saved(). A plain loop, after its optimizer step:
        `if probe.checkpoint_due(): save(...)`; the transformers and Lightning callbacks ask themselves."""
        k, s = self._checkpoint_every, self.step
        if k > 0 and s > self._step_base and s % k == 0 and self._checkpoint_asked != s:
            self._checkpoint_asked = s
            return True
        return False

    def _resume_skip_for(self, batches_per_epoch):
        """For the sampler wrapper's first epoch after a resume: the batches of it already trained, which a
        healthy resume skips (0 where the fault drops the sampler's position, or without a resume)."""
        step, self._resume_skip = self._resume_skip, None
        if not step or self.drops_sampler_state or batches_per_epoch <= 0:
            return 0
        return step % batches_per_epoch

    def _stop_for_restart(self):
        """Before step restart_at + 1: stop_for_restart, then exit status 3 once every rank is here (a
        barrier: no rank leaves a peer waiting in a collective or a checkpoint's)."""
        frm = self._resume_plan["from_step"] if self._resume_plan else -1
        self._event("stop_for_restart", f"after step {self.step}: the scenario's restart (flatline starts the job "
                                        f"again; it resumes from its checkpoint of step {frm})")
        with self._writing():
            self.writer.flush()
        try:
            if torch.distributed.is_available() and torch.distributed.is_initialized():
                torch.distributed.barrier()
        finally:
            self._close_writer()
            os._exit(EXIT_RESTART)

    def set_phase(self, phase):
        self.phase = phase

    def _install_exit_handlers(self):
        prev = sys.excepthook

        def hook(tp, value, tb):
            if not self._closed:
                self._event("error", f"{tp.__name__}: {value}", step=self.cur or self.step)
                self._close_writer()
            prev(tp, value, tb)
        sys.excepthook = hook
        if threading.current_thread() is threading.main_thread():
            ppid = os.getppid()
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                if signal.getsignal(sig) not in (signal.SIG_DFL, signal.default_int_handler):
                    continue  # the job handles it itself

                def on_signal(signum, frame, ppid=ppid, prev=signal.getsignal(sig)):
                    if os.getpid() != self._pid:  # a forked child: the signal does what it did without the probe
                        if prev is signal.default_int_handler:
                            prev(signum, frame)
                        signal.signal(signum, signal.SIG_DFL)
                        os.kill(os.getpid(), signum)
                        return
                    who = f"the launcher (pid {ppid}) died" if os.getppid() != ppid else "from outside"
                    if self._in_write:  # this thread is inside the writer: handled when it is out (_writing)
                        self._signalled = (signum, who)
                        return
                    self._interrupted(signum, who)
                signal.signal(sig, on_signal)

    def _interrupted(self, signum, who):
        self._signalled = None
        self._event("interrupted", f"{signal.Signals(signum).name} ({who})", step=self.cur or self.step)
        self._close_writer()
        os._exit(128 + signum)

    # ---- per step ------------------------------------------------------------------------------
    def _reset_step_stats(self):
        self._vals = []          # (name, 0-d tensor or float): the step's statistics, read when the record is filled
        self._numel = 0          # gradient elements the nonzero counts are over
        self._bucket_grads = False  # grad_sq came from DDP's buckets (scaled, under a GradScaler)
        self._first_bucket = True
        self._scale_at_backward = None
        self._stepped = False
        self._update.forget()
        self._loss = None
        self._batch_hash = None
        self._hash_words = None  # a GPU batch's hash words, on the device (read with the statistics)
        self._batch_seen = False
        self._lr_used = None
        self._step_params = self._step_key = None  # the parameters before_update() read, and their key
        self._grads_mark = None  # (len(_vals), _numel) before before_update() took the gradients' statistics

    def begin_step(self):
        """The step after the last completed one begins (idempotent)."""
        if self.cur is not None:
            return
        if self._restart_at > 0 and not self.resumed and self.step == self._restart_at:
            self._stop_for_restart()
        self.cur = self.step + 1
        self._act = self._acts(self.cur)
        every = self.plan["log_every"] if self.plan else 1
        # a step the log does not keep is not measured (a frozen logger's record is kept)
        self._logging = self.cur % every == 0 or bool(self._act.get("freeze_logging"))
        self.phase = "data"
        if self._act.get("data_block_s"):
            time.sleep(self._act["data_block_s"])
        if self._act.get("scheduler_frozen") and self._lr_pinned is None and self.optimizer is not None:
            self._lr_pinned = [g["lr"] for g in self._groups()]

    def loss(self, loss):
        """This step's loss (a tensor or a number): one line in a loop no hook can see the loss of."""
        self.begin_step()
        self._loss = loss.detach() if torch.is_tensor(loss) else torch.tensor(float(loss))
        return loss

    def batch(self, batch, ids=None):
        """The step's batch: hashed (its sample ids, else its tensors' bytes: _hash_batch) before the model
        sees it (a forward that changes its input in place, an in-place dropout on it, would change the
        hash of a replayed batch) and, where the plan replays an earlier batch, overwritten in place with
        it first. Returns the batch."""
        self.begin_step()
        self._batch_seen = True
        step = self.cur
        ids = ids if ids is not None else self._ids_by_step.pop(step, None)
        tensors = tensors_of(batch)
        j = self._act.get("batch_index")
        if j is not None and ids is None:
            kept = self._kept_batches.get(j)
            if kept is None:
                raise PlanError(f"step {step}: the plan replays batch {j}, which this process never trained")
            if [t.shape for t in tensors] != [t.shape for t in kept]:
                raise PlanError(f"step {step}: batch {j} had other shapes than this step's batch")
            with torch.no_grad():
                for t, k in zip(tensors, kept):
                    t.copy_(k)
        elif step - 1 in self._replayed and ids is None:
            self._kept_batches[step - 1] = [t.detach().clone() for t in tensors]
        self.phase = "compute"
        if self._logging:  # (no record this step: no hash)
            self._hash_batch(ids, tensors)
        return batch

    def _hash_batch(self, ids, tensors):
        """The batch's hash into _batch_hash; on a GPU its words are summed there (_hash_words) and read
        with the step's statistics."""
        if ids is None:
            got = self._native.xxh64(tensors) if self._native is not None else None
            if got is None:  # (not all dense CPU tensors: a sparse or jagged one as its strided parts)
                parts = hashed_tensors(tensors)
                if parts is not tensors:
                    tensors = parts
                    got = self._native.xxh64(tensors) if self._native is not None else None
            if got is not None:  # one native call (hashlib's BLAKE2b below costs ~100x as much a byte); an
                self._batch_hash = got  # int, made the record's 16 hex digits on the recorder's thread
                return
            if any(t.is_cuda for t in tensors):
                self._hash_words = device_hash_words(tensors)
                return
        h = hashlib.blake2b(digest_size=8)
        if ids is not None:
            h.update(",".join(str(int(i)) for i in ids).encode())
        else:
            for t in tensors:
                h.update(bytes_of(t))
        self._batch_hash = h.hexdigest()

    def wrap_batch_sampler(self, batch_sampler):
        """A batch sampler (or a sampler with .batch_size) for the DataLoader's batch_sampler=."""
        return ReplaySampler(self, batch_sampler)

    # ---- the model: batches and the loss through forward hooks; DDP's communication hook -------------
    def watch_model(self, model, loss_from_output=False):
        ddp_type = torch.nn.parallel.DistributedDataParallel
        inner = model.module if isinstance(model, ddp_type) else model
        def pre(module, args, kwargs):  # the step's first training forward sees its batch
            if module.training and torch.is_grad_enabled() and not self._batch_seen:
                self.batch((args, kwargs))
            return None
        inner.register_forward_pre_hook(pre, with_kwargs=True)
        if loss_from_output:
            def post(module, args, output):
                if module.training and torch.is_grad_enabled():
                    loss = getattr(output, "loss", None)
                    if loss is None and isinstance(output, dict):
                        loss = output.get("loss")
                    if torch.is_tensor(loss):
                        self.loss(loss)
            inner.register_forward_hook(post)
        self.watch_ddp(model)

    def watch_ddp(self, model):
        ddp = _ddp_of(model)
        if ddp is None:
            if self.world_size > 1:
                print("flatline probe: no DistributedDataParallel wraps the model: local_grad_norm is the global "
                      "one, and rank faults cannot be injected", file=sys.stderr, flush=True)
            return
        if self._ddp is ddp:
            return
        self._ddp = ddp
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        pg = ddp.process_group
        ws = pg.size()

        def allreduce(bucket):
            """DDP's default hook (default_hooks.allreduce_hook: divide by the world size first, then sum),
            calling the process group itself: torch.distributed.all_reduce's checks in Python cost the
            step more than the call (complex buckets still go through it, for its real view). A Future
            whose value is the bucket, or a list holding it."""
            buf = bucket.buffer()
            if buf.is_complex():
                return default_hooks.allreduce_hook(pg, bucket)
            buf.div_(ws)
            return pg.allreduce([buf]).get_future()

        def bucket_of(f):
            v = f.value()
            return v[0] if isinstance(v, list) else v

        def hook(state, bucket):
            self.begin_step()
            buf = bucket.buffer()
            a = self._act
            if self._first_bucket:
                self._first_bucket = False
                if self.scaler is not None:
                    sc = self.scaler._scale
                    self._scale_at_backward = sc.detach().clone() if sc is not None else None
                if a.get("block_s"):
                    self.phase = "collective"
                    time.sleep(a["block_s"])
                if a.get("inject_inf"):
                    buf.view(-1)[0] = float("inf")
            if a.get("zero_grads") or a.get("skip_backward"):
                buf.zero_()
            logging = self._logging
            if logging:
                self._vals.append(("local_sq", sq_norm(buf.detach())))
            self.phase = "collective"
            fut = allreduce(bucket)
            if not logging:
                return fut.then(bucket_of)
            index = bucket.index()

            def after(f):  # may run on the process group's thread: a scratch buffer per bucket
                v = bucket_of(f)
                t = v.detach()
                g = self._native.grad_stats_of((t,)) if self._native is not None else None
                if g is not None:
                    self._vals += (("grad_sq", g[0]), ("nonzero", g[1]))
                else:  # torch calls: the signs counted in a scratch buffer kept for this bucket
                    scratch = self._scratch.get(index)
                    dtype = scratch_dtype(t)
                    if scratch is None or scratch.shape != t.shape or scratch.device != t.device or \
                            scratch.dtype != dtype:
                        scratch = self._scratch[index] = torch.empty(t.shape, dtype=dtype, device=t.device)
                    self._vals += (("grad_sq", sq_norm(t)), ("nonzero", nonzeros(t, scratch)))
                self._numel += t.numel()
                self._bucket_grads = True
                return v
            return fut.then(after)
        ddp.register_comm_hook(None, hook)

    # ---- the optimizer: the update's statistics and the lr faults -----------------------------------
    def _groups(self):
        opt = self.optimizer
        return getattr(opt, "param_groups", None) or opt.optimizer.param_groups

    def _params(self):
        return [p for g in self._groups() for p in g["params"]]

    @staticmethod
    def _params_key(params):
        """What identifies a list of parameters for the flat copies: their ids."""
        return tuple(map(id, params))

    def watch_optimizer(self, optimizer):
        opt = getattr(optimizer, "optimizer", optimizer)  # accelerate's AcceleratedOptimizer wraps one
        self.optimizer = opt
        # torch wraps each class's own step() in the hooks: an optimizer class whose step() calls its base
        # class's (super().step()) runs them again inside, after its own work; only the outer pair counts.
        # A step() that raised ran no post-hooks: its call, no longer on the stack, is not an outer one
        def pre(o, args, kwargs):
            if self._opt_depth and not _on_stack(self._opt_outer):
                self._opt_depth = 0
            self._opt_depth += 1
            if self._opt_depth == 1:
                self._opt_outer = sys._getframe(1)
                if not self._manual_before_update:
                    self.before_update()

        def post(o, args, kwargs):
            self._opt_depth -= 1
            if self._opt_depth == 0:
                self._opt_outer = None
                self.after_update()
        opt.register_step_pre_hook(pre)
        opt.register_step_post_hook(post)

    def before_update(self):
        """Gradients averaged and unscaled, the update not yet made: statistics, then the lr faults."""
        self.begin_step()
        self.phase = "optimizer"
        params = self._params()
        if self._logging:
            key = self._step_key = self._params_key(params)
            self._step_params = params  # after_update() reads the same list
            if not self._bucket_grads:  # no DDP hook saw them: the norms here
                if self._grads_mark is not None:  # a step() that raised, tried again: taken anew, not added
                    del self._vals[self._grads_mark[0]:]
                    self._numel = self._grads_mark[1]
                self._grads_mark = (len(self._vals), self._numel)
                self._grad_stats(params, key)
            self._update.before(params, key)  # (its copies are made under no_grad: FlatCopy)
        self._give_lr_back()  # (where a step() that raised never did: before it is scaled again)
        groups = self._groups()
        f = self._lr_factor_at(self.cur)
        frozen = self._lr_pinned is not None and self._act.get("scheduler_frozen")
        if f != 1.0 or frozen:  # the job's own lr is given back after the update
            self._lr_saved = [g["lr"] for g in groups]
            for i, g in enumerate(groups):
                g["lr"] = (self._lr_pinned[i] if frozen else g["lr"]) * f
        self._lr_used = groups[0]["lr"]

    def _give_lr_back(self):
        """The job's own lr, where before_update() scaled or pinned it for the update."""
        if self._lr_saved is not None:
            for g, lr in zip(self._groups(), self._lr_saved):
                g["lr"] = lr
            self._lr_saved = None

    def _grad_stats(self, params, key):
        """The gradients' squared norm and nonzero count, where no DDP hook took them: one native pass where
        every parameter has a plain gradient (native.py), else per kind (sparse ones apart) with torch calls."""
        grads = [p.grad for p in params]
        g = None
        if self._native is not None:
            try:
                g = self._native.grad_stats_of(grads)
            except AttributeError:  # a parameter without a gradient (None): taken apart below
                pass
        if g is None:
            if any(g is None for g in grads):
                with_grad = [(p, g) for p, g in zip(params, grads) if g is not None]
                key, grads = tuple(id(p) for p, _ in with_grad), [g for _, g in with_grad]
            with torch.no_grad():
                if any(g.layout is not torch.strided for g in grads):  # nn.Embedding(sparse=True)
                    grads = self._sparse_grad_stats(grads)
                g = self._native.grad_stats_of(grads) if grads and self._native is not None else None
                if g is None:
                    for flat in self._grads.copy(grads, key) if grads else ():
                        self._vals.append(("grad_sq", sq_norm(flat)))
                        self._vals.append(("nonzero", nonzeros_(flat)))  # the copy is ours to overwrite
                        self._numel += flat.numel()
                    return
        self._vals += (("grad_sq", g[0]), ("nonzero", g[1]))
        self._numel += g[2]

    def _sparse_grad_stats(self, grads):
        """The squared norm and nonzero count of the sparse gradients among `grads` (over their coalesced
        values; an element no value names is 0; a complex one's over its values' real and imaginary parts,
        as FlatCopy counts a dense one's), taken here; returns the others."""
        dense = []
        for g in grads:
            if g.layout is torch.strided:
                dense.append(g)
                continue
            v = parts(g.coalesce().values()).reshape(-1).to(torch.float32, copy=True)
            self._vals += (("grad_sq", sq_norm(v)), ("nonzero", nonzeros_(v)))
            self._numel += g.numel() * (2 if g.is_complex() else 1)
        return dense

    def after_update(self):
        self._stepped = True
        self.opt_step += 1
        if self._logging:
            params, key = self._step_params, self._step_key
            if params is None:  # no before_update() this step
                params = self._params()
                key = self._params_key(params)
            self._vals += self._update.after(params, key)
        self._give_lr_back()
        if self.scaler is None and not self._ends_by_callback:
            self.end_step()

    # ---- GradScaler: the scale faults and the end of an fp16 step --------------------------------
    def watch_scaler(self, scaler):
        self.scaler = scaler
        orig_unscale, orig_update = scaler.unscale_, scaler.update

        def unscale_(optimizer):
            self.begin_step()
            if self._scale_at_backward is None and scaler._scale is not None:
                self._scale_at_backward = scaler._scale.detach().clone()
            if self._act.get("inject_inf") and self._ddp is None:
                for p in self._params():
                    if p.grad is not None:
                        p.grad.view(-1)[0] = float("inf")
                        break
            return orig_unscale(optimizer)

        def update(new_scale=None):
            out = orig_update(new_scale)
            m = self._act.get("max_loss_scale")
            if m is not None and scaler._scale is not None:
                scaler._scale.clamp_(max=m)
            if not self._ends_by_callback:
                self.end_step()
            return out
        scaler.unscale_, scaler.update = unscale_, update

    # ---- the step's record ----------------------------------------------------------------------
    def end_step(self):
        """The step in progress is complete: its record is posted (idempotent)."""
        if self.cur is None:
            return
        step, a = self.cur, self._act
        now = time.monotonic()
        if not self._logging:  # no record: what a frozen logger would show later is kept, unread
            self._logged = (step, self._loss)
            self._last_end = now
            self.step, self.cur = step, None
            self.phase = "data"
            self._reset_step_stats()
            return
        rec = {"kind": "step", "rank": self.rank, "t": self._t(), "step": step, "opt_step": self.opt_step}
        vals = self._vals
        if self._loss is not None:
            vals.append(("loss", self._loss))
        if self.scaler is not None and self.scaler._scale is not None:
            # the scale this step's backward used (its update() decides the next step's)
            scale = self._scale_at_backward
            vals.append(("loss_scale", scale if scale is not None else self.scaler._scale.detach().clone()))
        lr = self._lr_used if self._lr_used is not None else (
            self._groups()[0]["lr"] * self._lr_factor_at(step) if self.optimizer is not None else None)
        if lr is not None:
            rec["lr"] = lr
        if self.scaler is not None:
            rec["overflow"] = rec["skipped"] = not self._stepped
        else:  # no loss scaling: the contract's 1, and no step is skipped for an overflow
            rec["loss_scale"], rec["overflow"], rec["skipped"] = 1.0, False, False
        if self._batch_hash is not None:
            rec["batch_hash"] = self._batch_hash
        hash_words = self._hash_words
        rec["step_ms"] = (now - self._last_end) * 1e3
        if a.get("freeze_logging"):  # the logger shows what it showed last
            frozen = self._logged
        else:
            frozen, self._logged = None, (step, self._loss)
        how = (self._numel, self._bucket_grads, frozen)
        self._last_end = now
        self.step, self.cur = step, None
        self.phase = "data"
        self._reset_step_stats()
        self._post_step(rec, vals, hash_words, how)

    def _post_step(self, rec, vals, hash_words, how):
        """Queues the record for the recorder's thread, which reads its values (_record_*)."""
        cuda = hash_words.device if hash_words is not None else None
        if cuda is None:
            for _, t in vals:  # (floats from the native passes; 0-d tensors from torch's)
                if type(t) is not float and torch.is_tensor(t) and t.is_cuda:
                    cuda = t.device
                    break
        if cuda is None:  # 0-d CPU tensors and floats: read there
            self.recorder.put(self._record_cpu, rec, vals, how)
            return
        # copied to pinned memory, read on the recorder's thread (no sync here)
        names = [n for n, _ in vals]
        dev = torch.stack([torch.as_tensor(t).detach().reshape(()).to(cuda, torch.float64) for _, t in vals]) \
            if vals else \
            torch.zeros(0, dtype=torch.float64, device=cuda)
        if hash_words is not None:
            dev = torch.cat([dev, hash_words])
            names = names + ["hash_word"] * hash_words.numel()
        host = torch.empty(dev.shape, dtype=dev.dtype, pin_memory=True)
        host.copy_(dev, non_blocking=True)
        ev = torch.cuda.Event()
        ev.record(torch.cuda.current_stream(cuda))  # the copy's device's stream (not the current device's)
        self.recorder.put(self._record_copied, rec, names, host, ev, how)

    def _record_cpu(self, rec, vals, how):
        """On the recorder's thread: the step's CPU values read, the record filled and posted."""
        self._fill(rec, [n for n, _ in vals], [x.item() if torch.is_tensor(x) else x for _, x in vals], how)

    def _record_copied(self, rec, names, host, ev, how):
        """On the recorder's thread: the device's copy waited for, the record filled and posted."""
        ev.synchronize()
        self._fill(rec, names, host.tolist(), how)

    def _fill(self, rec, names, values, how):
        """The record's statistics from the step's values: norms are the roots of the summed squares (under a
        GradScaler, DDP's buckets hold scaled gradients: divided by the scale their backward used)."""
        numel, bucket_grads, frozen = how
        v, words = {}, []
        for n, x in zip(names, values):
            if n == "hash_word":
                words.append(int(x))
            else:
                v[n] = v.get(n, 0.0) + float(x) if n in _SUMMED else float(x)
        if words:
            rec["batch_hash"] = hash_of_words(words)
        elif type(rec.get("batch_hash")) is int:  # the native XXH64's
            rec["batch_hash"] = f"{rec['batch_hash']:016x}"
        scale = v.get("loss_scale")
        unscale = scale if scale is not None and finite(scale) and scale > 0 else 1.0
        out = {"loss": v.get("loss"), "loss_scale": scale}
        if "grad_sq" in v:
            out["grad_norm"] = math.sqrt(v["grad_sq"]) / (unscale if bucket_grads else 1.0)
        if "local_sq" in v:
            out["local_grad_norm"] = math.sqrt(v["local_sq"]) / unscale
        elif "grad_norm" in out:
            out["local_grad_norm"] = out["grad_norm"]
        for k in ("param", "update"):
            if k + "_sq" in v:
                out[k + "_norm"] = math.sqrt(v[k + "_sq"])
        for k in ("loss", "grad_norm", "local_grad_norm", "param_norm", "update_norm", "loss_scale"):
            if finite(out.get(k)) and not (k == "grad_norm" and rec.get("skipped")):
                rec[k] = out[k]
        if "nonzero" in v and numel and not math.isnan(v.get("grad_sq", 0.0)):  # (a NaN's sign is 0)
            rec["grad_zero_frac"] = 1.0 - v["nonzero"] / numel
        if frozen is not None:  # the logger shows what it showed last
            rec["step"], last_loss = frozen
            if torch.is_tensor(last_loss):
                last_loss = float(last_loss)
            if finite(last_loss):
                rec["loss"] = last_loss
            else:
                rec.pop("loss", None)
        every = self.plan["log_every"] if self.plan else 1
        if rec["step"] % every == 0 or frozen is not None:
            self.writer.add(rec)  # written by the recorder's flush after its drain, or the event or end behind it

    # ---- the end ----------------------------------------------------------------------------------
    def _close_writer(self):
        if self._closed:
            return
        with self._writing():
            self._closed = True
            self.heartbeat.stop()
            self.recorder.stop()
            self.recorder.drain()
            self.writer.close()

    def close(self):
        """The run ended normally: pending records, then run_end (also at interpreter exit)."""
        if self._closed:
            return
        self._event("run_end", f"{self.step} steps")
        self._close_writer()


def attach(run_dir, model, optimizer, scaler=None, sampler=None, **kw):
    """A plain PyTorch loop: the optimizer's step hooks, DDP's communication hook (model is the DDP
    module, or what one wraps), GradScaler (scaler), a batch sampler's wrapper (sampler: give
    `probe.sampler` to the DataLoader as batch_sampler=). Add `probe.loss(loss)` each step."""
    return Probe(run_dir, model, optimizer, scaler, sampler, **kw)
