#!/usr/bin/env python3
"""A file watcher written with the real `tensorboard` package, as a team's TensorBoard alert is.

It never reads stdin: it closes it and tails the event files under $FLATLINE_LOG_TENSORBOARD with
tensorboard's own EventFileLoader (each Load() goes on from where the last one stopped), every 0.2 s,
like any `tail -f` alert. It alarms lr_zero once `train/learning_rate` is 0 after having been above 0
(a schedule that decayed to nothing; warm-up from 0 is no alarm), once, and keeps watching.

flatline feeds such a detector by time (docs/DETECTORS.md, "Two shapes"): live, the files grow as the
ranks write them; replayed, the re-enactment grows by the recorded clock. At the end of the run it gets
SIGTERM, its normal end.

  build/flatline score --formats tensorboard --detector tbwatch='python3 examples/detectors/tensorboard_watch.py'
"""
import glob
import json
import os
import signal
import sys
import time

from tensorboard.backend.event_processing import event_file_loader
from tensorboard.util import tensor_util

os.close(0)  # a watcher: stdin is not its input
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # the end of the run

logdir = os.environ["FLATLINE_LOG_TENSORBOARD"]
loaders = {}
peak, alarmed = 0.0, False
while True:
    for path in sorted(glob.glob(os.path.join(logdir, "**", "*tfevents*"), recursive=True)):
        loader = loaders.setdefault(path, event_file_loader.EventFileLoader(path))
        for event in loader.Load():
            for value in event.summary.value:
                if value.tag != "train/learning_rate" or alarmed:
                    continue
                # the loader migrates simple_value scalars to tensors (tensorboard's data_compat)
                lr = float(tensor_util.make_ndarray(value.tensor)) if value.HasField("tensor") else value.simple_value
                peak = max(peak, lr)
                if peak > 0 and lr == 0:
                    alarmed = True
                    print(json.dumps({"cause": "lr_zero", "step": event.step,
                                      "evidence": f"train/learning_rate 0 at step {event.step} (peak {peak:g})"}),
                          flush=True)
    time.sleep(0.2)
