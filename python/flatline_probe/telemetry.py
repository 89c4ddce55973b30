"""The probe's telemetry writer and heartbeat thread (docs/DESIGN.md §3, §16).

One JSON object a line in <run dir>/telemetry/rank-<r>.jsonl. Lines are written whole (one write(2) of
the lines pending, never a part of one) from whichever thread posts them (the training's or the
heartbeat's), under a lock:
  - a heartbeat or an event is written at once, with every line posted before it;
  - a record given to post() is written at once when the last write is FLUSH_S or more ago; else it
    waits for the next post or heartbeat. One given to add() waits for the next flush(), post(now=True)
    or close(): the probe's step records, added by the recorder (below), which flushes them after each
    drain, so a drain's records take one write(2) (~25-70 us on ext4, which updates the file's times
    through its journal). So a step record reaches the page cache within about FLUSH_S of its step's
    end, and never later than a heartbeat interval. The probe writes what is pending when the training
    ends, raises, or is signalled (SIGTERM, SIGINT, SIGHUP); a process killed outright (SIGKILL, a crash
    in native code) loses what was pending: at most about FLUSH_S of records.
A write that fails is reported on stderr with the file and the OS's reason, and the probe stops writing
(the training is the user's: it is not ended for it).

The step records are finished off the training's thread (`Recorder`): the training's thread queues what
a step gave (its 0-d tensors and sums, the device's copies still on their way), and a thread of the
probe's own, FLUSH_S after the first of them was queued (looking every FLUSH_S while they come, asleep
after IDLE_S without any), reads them, fills the records, encodes them and writes them, in the order
queued, in one write(2); so a record reaches the file within about FLUSH_S of its step's end, and the
encoding (~10-40 us a record, cold) is not the step's. Events are queued behind the records before them
and written at once (`drain()` on the poster's thread), as is whatever is queued when the training ends,
raises or is signalled.
"""
import collections
import json
import math
import os
import sys
import threading
import time

FLUSH_S = 0.02  # a step record waits at most this long for the records after it (above)
IDLE_S = 1.0    # the recorder's thread sleeps until woken after this long with nothing queued (Recorder)
_encode = json.JSONEncoder(separators=(",", ":")).encode  # one encoder (json.dumps makes one a call)


def finite(x):
    return x is not None and isinstance(x, (int, float)) and math.isfinite(x)


class Writer:
    def __init__(self, path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        self._lock = threading.Lock()
        self._pending = []       # encoded lines not yet written
        self._written = 0.0      # time.monotonic() of the last write
        self._failed = False
        self._last = (None, None)  # the kind and step of the last record posted

    def post(self, record, now=False):
        """Posts a record: written at once when `now` (heartbeats, events) or FLUSH_S after the last write."""
        self._append(record, now, True)

    def add(self, record):
        """Adds a record to what is pending, written by the next flush(), post(now=True) or close(): the
        recorder's thread adds a drain's step records and then flushes them in one write(2) (a post() of
        the first of them, FLUSH_S after the last write, would have written that one alone)."""
        self._append(record, False, False)

    def _append(self, record, now, by_time):
        line = (_encode(record) + "\n").encode()
        with self._lock:
            if self._failed or self._fd is None:
                return
            self._pending.append(line)
            self._last = (record.get("kind"), record.get("step"))
            if now or by_time:
                t = time.monotonic()
                if now or t - self._written >= FLUSH_S:
                    self._write(t)

    def flush(self):
        with self._lock:
            if self._pending and self._fd is not None and not self._failed:
                self._write(time.monotonic())

    def _write(self, t):  # under the lock
        data = b"".join(self._pending) if len(self._pending) > 1 else self._pending[0]
        n = len(self._pending)
        self._pending.clear()
        self._written = t
        try:
            while data:
                data = data[os.write(self._fd, data):]
        except OSError as e:
            self._failed = True
            kind, step = self._last
            print(f"flatline probe: {self.path}: cannot write {n} record(s), the last the {kind} record of step "
                  f"{step}: {e.strerror or e}", file=sys.stderr, flush=True)

    def disown(self):
        """In a process forked from this one: the file and the pending lines are the parent's, and so may
        be the lock (held at the fork by another thread); nothing is written from here."""
        self._fd, self._pending, self._lock = None, [], threading.Lock()

    def close(self):
        with self._lock:
            if self._pending and self._fd is not None and not self._failed:
                self._write(time.monotonic())
            fd, self._fd = self._fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass


def _taken_lock():
    lock = threading.Lock()
    lock.acquire()
    return lock


def _release(lock):
    """Releases a lock another thread may have released first (the second release is a no-op)."""
    try:
        lock.release()
    except RuntimeError:  # already released
        pass


class Recorder:
    """Work queued by the training's thread, done in order on a thread of its own `interval_s` after the
    first of it was queued (then `then()`, e.g. the writer's flush), or at once by whoever calls drain().
    put(fn, *args) queues fn(*args); a callable that raises is reported on stderr and the rest go on.

    While work comes, the thread looks at the queue every interval by itself: put() only appends, and the
    training's thread never pays for a wake-up (a futex wake cost the waker ~15-25 µs on the 2-vCPU
    development VM, once an interval). After `idle_s` with nothing queued it sleeps until a put() wakes it
    (an idle or stopped job does not wake it every interval)."""

    def __init__(self, interval_s, then=None, idle_s=None):
        self.interval_s, self._then = interval_s, then
        self._idle_rounds = max(1, math.ceil((IDLE_S if idle_s is None else idle_s) / interval_s))
        self._items = collections.deque()  # (fn, args): append and popleft are atomic
        self._lock = threading.RLock()     # one drainer at a time (a signal handler may drain inside one)
        self._stop = threading.Event()
        # released by put() while the thread sleeps. A bare lock, released in one C call: an Event's set()
        # holds its Condition's lock across Python code, where the probe's SIGTERM handler may run on the
        # same (training's) thread, queue its event and wait forever for that lock
        self._queued = _taken_lock()
        self._sleeping = False  # the thread sleeps until put() releases _queued
        self._thread = threading.Thread(target=self._run, name="flatline-recorder", daemon=True)
        self._thread.start()

    def put(self, fn, *args):
        self._items.append((fn, args))
        # after the append: the thread looks at the queue again after it says it sleeps and before it does,
        # so an item queued before this read is seen there, and one after it is released for (no wake-up
        # is lost; a release the thread did not need only makes it look once more)
        if self._sleeping:
            _release(self._queued)

    def drain(self):
        with self._lock:
            items = self._items
            while items:
                fn, args = items.popleft()
                self._call(fn, args)

    @staticmethod
    def _call(fn, args):
        try:
            fn(*args)
        except Exception as e:  # the training is the user's: a record that cannot be made is named, not raised
            print(f"flatline probe: a record could not be made: {type(e).__name__}: {e}", file=sys.stderr, flush=True)

    def _run(self):
        idle = self._idle_rounds  # asleep until the first put()
        while True:
            if idle >= self._idle_rounds:
                self._sleeping = True
                if not self._items:
                    self._queued.acquire()  # until put() (or stop()) releases it
                self._sleeping = False
                self._queued.acquire(blocking=False)  # (taken again: the next sleep waits for a release)
                idle = 0
            if self._stop.wait(self.interval_s):  # what came in the interval, together
                return
            if self._items:
                idle = 0
                self.drain()
                if self._then is not None:
                    self._call(self._then, ())
            else:
                idle += 1

    def disown(self):
        """In a process forked from this one: what is queued is the parent's, and so may be the lock (held
        at the fork by a thread the child does not have); both are dropped, nothing is done."""
        self._items, self._lock, self._queued = collections.deque(), threading.RLock(), _taken_lock()

    def stop(self):
        """Stops the thread (after the drain in progress); what is still queued is left for drain()."""
        self._stop.set()
        _release(self._queued)
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=5)


class Heartbeat:
    """A heartbeat record every `interval_s`, whatever training does: the step in progress and its phase."""

    def __init__(self, probe, interval_s):
        self.probe, self.interval_s = probe, interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="flatline-heartbeat", daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.wait(self.interval_s):
            self.probe._heartbeat()

    def stop(self):
        self._stop.set()
        self._thread.join(timeout=5)
