"""The real `tensorboard` package reads the event file flatline's TensorBoard writer writes, with the
values of the run's telemetry (rank 0): `flatline export` of the recorded lr-zero-gpt run, then
tensorboard's EventAccumulator. Run by ctest with FLATLINE_PYTHON, FLATLINE_BIN, FLATLINE_TEST_CORPUS.
"""
import json
import os
import subprocess
import tempfile
import unittest

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


class TensorBoardReadsOurEvents(unittest.TestCase):
    def test_scalars_match_the_telemetry(self):
        run = os.path.join(os.environ["FLATLINE_TEST_CORPUS"], "lr-zero-gpt")
        with tempfile.TemporaryDirectory() as d:
            subprocess.run([os.environ["FLATLINE_BIN"], "export", run, "--formats", "tensorboard", "--out", d],
                           check=True, capture_output=True)
            acc = EventAccumulator(os.path.join(d, "formats", "tensorboard"))
            acc.Reload()
            tags = acc.Tags()["scalars"]
            self.assertEqual(sorted(tags), ["train/epoch", "train/grad_norm", "train/learning_rate", "train/loss"])
            steps = {}
            with open(os.path.join(run, "telemetry", "rank-0.jsonl")) as f:
                for line in f:
                    r = json.loads(line)
                    if r["kind"] == "step":
                        steps[r["step"]] = r
            lr = {e.step: e.value for e in acc.Scalars("train/learning_rate")}
            loss = {e.step: e.value for e in acc.Scalars("train/loss")}
            gn = {e.step: e.value for e in acc.Scalars("train/grad_norm")}
            self.assertEqual(sorted(lr), sorted(steps))
            for s, r in steps.items():
                self.assertAlmostEqual(lr[s], r["lr"], delta=1e-7 * max(1.0, r["lr"]))
                self.assertAlmostEqual(loss[s], round(r["loss_avg"], 4), places=4)
                self.assertAlmostEqual(gn[s], r["grad_norm"], delta=1e-6 * max(1.0, r["grad_norm"]))
            self.assertEqual(lr[200], 0.0)  # the fault: the schedule ended at step 160
            wall = [e.wall_time for e in acc.Scalars("train/loss")]
            self.assertEqual(wall, sorted(wall))


if __name__ == "__main__":
    unittest.main()
