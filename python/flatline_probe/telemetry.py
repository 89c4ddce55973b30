"""The probe's telemetry writer and heartbeat thread (docs/DESIGN.md §3).

One JSON object a line in <run dir>/telemetry/rank-<r>.jsonl, written by a background thread in the
order posted and flushed at once (the harness's bound is 5 ms, telemetry/async_writer.h); `close()`
drains it, so every completed step is on disk. A write that fails is reported on stderr with the file
and the OS's reason, and the probe stops writing (the training is the user's: it is not ended for it).
"""
import json
import math
import os
import queue
import sys
import threading
import time


def finite(x):
    return x is not None and isinstance(x, (int, float)) and math.isfinite(x)


class Writer:
    def __init__(self, path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self.path = path
        self._f = open(path, "a", encoding="utf-8")
        self._q = queue.SimpleQueue()
        self._failed = False
        self._thread = threading.Thread(target=self._run, name="flatline-telemetry", daemon=True)
        self._thread.start()

    def post(self, record):
        self._q.put(record)

    def _run(self):
        while True:
            r = self._q.get()
            if r is None:
                return
            if self._failed:
                continue
            try:
                self._f.write(json.dumps(r, separators=(",", ":")) + "\n")
                self._f.flush()
            except OSError as e:
                self._failed = True
                print(f"flatline probe: {self.path}: cannot write the {r.get('kind')} record of step "
                      f"{r.get('step')}: {e.strerror or e}", file=sys.stderr, flush=True)

    def close(self):
        if self._thread.is_alive():
            self._q.put(None)
            self._thread.join(timeout=10)
        try:
            self._f.close()
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
