"""The probe's telemetry writer and heartbeat thread (docs/DESIGN.md §3).

One JSON object a line in <run dir>/telemetry/rank-<r>.jsonl, written and flushed as it is posted (the
harness's bound is 5 ms, telemetry/async_writer.h), so every completed step is on disk. A write that
fails is reported on stderr with the file and the OS's reason, and the probe stops writing (the
training is the user's: it is not ended for it).
"""
import json
import math
import os
import sys
import threading
import time


def finite(x):
    return x is not None and isinstance(x, (int, float)) and math.isfinite(x)


class Writer:
    """Writes each record as it is posted, from whichever thread posts it (the training's or the heartbeat's),
    under a lock. A line of a few hundred bytes to the page cache costs microseconds; a writer thread
    woken per record cost the training's thread more in handing the interpreter lock back and forth
    (bench/probe_overhead.py)."""

    def __init__(self, path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self.path = path
        self._f = open(path, "a", encoding="utf-8")
        self._lock = threading.Lock()
        self._failed = False

    def post(self, record):
        line = json.dumps(record, separators=(",", ":")) + "\n"
        with self._lock:
            if self._failed or self._f is None:
                return
            try:
                self._f.write(line)
                self._f.flush()
            except OSError as e:
                self._failed = True
                print(f"flatline probe: {self.path}: cannot write the {record.get('kind')} record of step "
                      f"{record.get('step')}: {e.strerror or e}", file=sys.stderr, flush=True)

    def close(self):
        with self._lock:
            f, self._f = self._f, None
        if f is not None:
            try:
                f.close()
            except OSError:
                pass


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
