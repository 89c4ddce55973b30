"""The probe's writer and recorder (python/flatline_probe/telemetry.py, docs/DESIGN.md §16): heartbeats and
events at once, step records within FLUSH_S (or at the flush after add()), whole lines only, a failed write named once; the recorder's
work done in order, on its thread or by drain(), a failing item named and the rest done."""
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

from flatline_probe import telemetry
from flatline_probe.telemetry import Recorder, Writer


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

    def test_add_only_appends_and_the_next_flush_or_post_now_writes_them_in_one_write(self):
        w = Writer(self.path)
        writes = []
        real = w._write
        w._write = lambda t: (writes.append(len(w._pending)), real(t))
        time.sleep(telemetry.FLUSH_S * 1.5)  # (a post() now would write at once)
        for s in range(1, 4):
            w.add({"kind": "step", "step": s})
        self.assertEqual((lines(self.path), writes), ([], []))
        w.flush()
        self.assertEqual(([r["step"] for r in lines(self.path)], writes), ([1, 2, 3], [3]))
        w.add({"kind": "step", "step": 4})
        w.post({"kind": "event", "step": 4}, now=True)  # an event takes what was added along
        self.assertEqual(([r["kind"] for r in lines(self.path)][3:], writes), (["step", "event"], [3, 2]))
        w.add({"kind": "step", "step": 5})
        w.close()
        w.add({"kind": "step", "step": 6})  # after close: dropped
        self.assertEqual([r["step"] for r in lines(self.path)][-1], 5)

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


class RecorderTest(unittest.TestCase):
    def test_drain_does_the_queue_in_order_on_the_callers_thread(self):
        r = Recorder(60.0)  # its thread will not get to it
        done = []
        for i in range(5):
            r.put(done.append, i)
        self.assertEqual(done, [])
        r.drain()
        self.assertEqual(done, [0, 1, 2, 3, 4])
        r.stop()

    def test_its_thread_does_the_queue_within_an_interval_then_calls_then(self):
        flushed = []
        r = Recorder(0.01, then=lambda: flushed.append(len(done)))
        done = []
        r.put(done.append, "a")
        r.put(done.append, "b")
        deadline = time.monotonic() + 5
        while not flushed and time.monotonic() < deadline:
            time.sleep(0.005)
        self.assertEqual(done, ["a", "b"])
        self.assertEqual(flushed[0], 2)  # after the queue it took
        r.stop()

    def test_with_nothing_queued_for_idle_s_its_thread_sleeps_until_something_is(self):
        import linecache
        import sys

        def where():
            frame = sys._current_frames()[r._thread.ident]
            while frame is not None and frame.f_code.co_name != "_run":
                frame = frame.f_back
            return linecache.getline(frame.f_code.co_filename, frame.f_lineno)

        r = Recorder(0.005, idle_s=0.02)
        done = []
        for _ in range(2):  # idle from the start, then idle again after a drain
            time.sleep(0.1)
            self.assertIn("_queued.acquire()", where())  # not a timed wait: no wake-ups every interval
            self.assertTrue(r._sleeping)
            r.put(done.append, len(done))
            deadline = time.monotonic() + 5
            while len(done) < _ + 1 and time.monotonic() < deadline:
                time.sleep(0.002)
        self.assertEqual(done, [0, 1])
        r.stop()
        self.assertFalse(r._thread.is_alive())

    def test_while_work_comes_put_only_appends(self):
        # the thread looks every interval by itself: the training's thread releases nothing (no wake-up)
        r = Recorder(0.01, idle_s=10.0)
        done = []
        r.put(done.append, 0)  # wakes it from its first sleep
        deadline = time.monotonic() + 5
        while not done and time.monotonic() < deadline:
            time.sleep(0.002)
        for i in range(1, 4):
            self.assertFalse(r._sleeping)
            self.assertTrue(r._queued.locked())
            r.put(done.append, i)
            self.assertTrue(r._queued.locked())  # not released: nothing woken
            while len(done) < i + 1 and time.monotonic() < deadline:
                time.sleep(0.002)
        self.assertEqual(done, [0, 1, 2, 3])
        r.stop()
        self.assertFalse(r._thread.is_alive())

    def test_a_signal_handler_that_queues_drains_and_stops_inside_put_does_not_hang(self):
        # the probe's SIGTERM handler runs on the training's thread, between any two bytecodes, also inside
        # put(): it queues its event, drains and stops the recorder. Here that handler is called at each
        # call and return within a put() (a superset of where a signal can land), with a fresh recorder each
        # time, in a child process (a hang is its timeout); each time both items are done, in order
        script = (
            "import sys\nfrom flatline_probe.telemetry import Recorder\n"
            "k = 0\n"
            "while True:\n"
            "    r, done, n = Recorder(60.0), [], [0]\n"
            "    def prof(frame, event, arg):\n"
            "        f = frame\n"
            "        while f is not None and f.f_code.co_name != 'put':\n"
            "            f = f.f_back\n"
            "        if f is None:\n"
            "            return\n"
            "        n[0] += 1\n"
            "        if n[0] == k + 1:  # the handler\n"
            "            r.put(done.append, 'event')\n"
            "            r.drain()\n"
            "            r.stop()\n"
            "    sys.setprofile(prof)\n"
            "    r.put(done.append, 'step')\n"
            "    sys.setprofile(None)\n"
            "    r.stop()\n"
            "    r.drain()\n"
            "    if n[0] <= k:  # past the last point: the handler did not run\n"
            "        break\n"
            "    assert done in (['step', 'event'], ['event', 'step']) and not r._thread.is_alive(), (k, done)\n"
            "    k += 1\n"
            "print(k)\n")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [os.path.join(os.path.dirname(__file__), "..", "..", "..", "python"), os.environ.get("PYTHONPATH", "")]))
        try:
            r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=30)
        except subprocess.TimeoutExpired:
            self.fail("put() hung under a handler that queued, drained and stopped inside it")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertGreaterEqual(int(r.stdout), 3, r.stdout)  # (the handler ran at that many points)

    def test_a_failing_item_is_named_and_the_rest_are_done(self):
        r = Recorder(60.0)
        done = []
        r.put(done.append, 1)
        r.put(lambda: 1 / 0)
        r.put(done.append, 3)
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            r.drain()
        self.assertEqual(done, [1, 3])
        self.assertIn("a record could not be made: ZeroDivisionError", err.getvalue())
        r.stop()

    def test_after_stop_what_is_queued_is_left_for_drain(self):
        r = Recorder(0.01)
        r.stop()
        done = []
        r.put(done.append, 1)
        time.sleep(0.05)
        self.assertEqual(done, [])
        r.drain()
        self.assertEqual(done, [1])


if __name__ == "__main__":
    unittest.main()
