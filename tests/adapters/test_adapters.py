"""The Python adapters (adapters/) score small real callbacks through `flatline score`, on the recorded
main suite (FLATLINE_TEST_CORPUS), with the real transformers and lightning packages.

Run by ctest with FLATLINE_PYTHON (a Python with transformers, lightning, tensorboard) from the
source tree: python -m unittest tests.adapters.test_adapters
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def score(*detectors):
    corpus = os.environ["FLATLINE_TEST_CORPUS"]
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "s.json")
        cmd = [os.environ["FLATLINE_BIN"], "score", os.path.join(corpus, "lr-zero-gpt"),
               os.path.join(corpus, "healthy-gpt"), "--json", out]
        for name, command in detectors:
            cmd += ["--detector", f"{name}={command}"]
        p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
        with open(out) as f:
            return p, json.load(f)


def runs(j, detector):
    return {r["scenario"]: r for r in j["detectors"][detector]["runs"]}


class Adapters(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        py = sys.executable
        cls.proc, cls.j = score(
            ("hf", f"{py} adapters/hf_trainer_callback.py tests.adapters.callbacks:StopOnZeroLr --cause lr_zero"),
            ("pl", f"{py} adapters/lightning_callback.py tests.adapters.callbacks:WarnOnZeroLr"))

    def test_hf_callback_stopping_training_is_a_correct_lr_zero_alarm(self):
        r = runs(self.j, "hf")
        self.assertIsNone(r["lr-zero-gpt"]["error"], self.proc.stdout)
        self.assertEqual(r["lr-zero-gpt"]["result"], "ok", self.proc.stdout)
        a = r["lr-zero-gpt"]["alarms"][0]
        self.assertEqual(a["cause"], "lr_zero")
        self.assertEqual(a["evidence"], ["StopOnZeroLr.on_log set control.should_training_stop at global_step 160"])
        self.assertEqual(a["step"], 160)  # stamped by the harness: the record the callback saw
        self.assertEqual(r["healthy-gpt"]["result"], "ok")
        self.assertEqual(r["healthy-gpt"]["alarms"], [])

    def test_lightning_callback_warning_is_a_detection(self):
        r = runs(self.j, "pl")
        self.assertIsNone(r["lr-zero-gpt"]["error"], self.proc.stdout)
        self.assertEqual(r["lr-zero-gpt"]["result"], "detected", self.proc.stdout)
        a = r["lr-zero-gpt"]["alarms"][0]
        self.assertIsNone(a["cause"])
        self.assertIn("WarnOnZeroLr at step 160: logged WARNING: learning rate is 0 at global step 160", a["evidence"][0])
        # Lightning's fit loop fetches the next batch before on_train_batch_end: one record late
        self.assertIn(a["step"], (160, 161))
        self.assertEqual(r["healthy-gpt"]["alarms"], [])


if __name__ == "__main__":
    unittest.main()
