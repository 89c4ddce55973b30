"""The probe's writer (python/flatline_probe/telemetry.py, docs/DESIGN.md §16): heartbeats and events at
once, step records within FLUSH_S, whole lines only, a failed write named once."""
import contextlib
import io
import json
import os
import tempfile
import time
import unittest

from flatline_probe import telemetry
from flatline_probe.telemetry import Writer


def lines(path):
    with open(path, "rb") as f:
        data = f.read()
    assert not data or data.endswith(b"\n"), data[-80:]  # whole lines only
    return [json.loads(line) for line in data.splitlines()]


class WriterTest(unittest.TestCase):
    def setUp(self):
        self.path = os.path.join(tempfile.mkdtemp(prefix="probe-writer-"), "telemetry", "rank-0.jsonl")

    def test_step_records_wait_at_most_flush_s_and_a_heartbeat_takes_them_along(self):
        w = Writer(self.path)
        w.post({"kind": "step", "step": 1})  # the first write: at once
        w.post({"kind": "step", "step": 2})  # within FLUSH_S of it: pending
        self.assertEqual([r["step"] for r in lines(self.path)], [1])
        w.post({"kind": "heartbeat", "step": 3}, now=True)  # with every line before it
        self.assertEqual([r["step"] for r in lines(self.path)], [1, 2, 3])
        w.post({"kind": "step", "step": 3})
        time.sleep(telemetry.FLUSH_S * 1.5)
        w.post({"kind": "step", "step": 4})  # FLUSH_S after the last write: both
        self.assertEqual([r["step"] for r in lines(self.path)], [1, 2, 3, 3, 4])
        w.post({"kind": "step", "step": 5})
        w.close()  # what is pending, then the file is closed; later posts are dropped
        w.post({"kind": "step", "step": 6})
        self.assertEqual([r["step"] for r in lines(self.path)][-1], 5)

    def test_flush_writes_what_is_pending(self):
        w = Writer(self.path)
        for s in range(1, 4):
            w.post({"kind": "step", "step": s})
        w.flush()
        self.assertEqual([r["step"] for r in lines(self.path)], [1, 2, 3])
        w.close()

    def test_a_failed_write_is_named_once_and_writing_stops(self):
        w = Writer(self.path)
        w.close()
        w = Writer(self.path)
        os.close(w._fd)
        w._fd = os.open("/dev/full", os.O_WRONLY)  # every write: ENOSPC
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            w.post({"kind": "step", "step": 7})
            w.post({"kind": "event", "step": 8}, now=True)
        self.assertEqual(err.getvalue().count("cannot write"), 1, err.getvalue())
        self.assertIn(f"{self.path}: cannot write 1 record(s), the last the step record of step 7", err.getvalue())
        self.assertIn("No space left on device", err.getvalue())
        w.close()


if __name__ == "__main__":
    unittest.main()
