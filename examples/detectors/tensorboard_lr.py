#!/usr/bin/env python3
"""A detector that watches the TensorBoard event file of a run (Python standard library only).

flatline writes the logs real frameworks write when a scenario (or `--formats tensorboard`) asks:
here the event file of the Hugging Face Trainer's TensorBoardCallback, under
$FLATLINE_LOG_TENSORBOARD. This detector reads that file the way a TensorBoard-watching alert would,
without the stdin feed's content: it parses the TFRecord framing and the Event protocol buffers by
hand and alarms lr_zero once `train/learning_rate` is 0 after having been above 0 (a schedule that
decayed to nothing; warm-up from 0 is not an alarm).

Stdin is its clock: after each line flatline feeds it (or every 0.2 s when none comes) it reads
whatever the event file has gained, and it stops at the end of stdin, when the run is over. Reading
stdin to its end also keeps the feed moving; a detector that ignores stdin should close it instead.

  build/flatline score --formats tensorboard --detector tb='python3 examples/detectors/tensorboard_lr.py'
"""
import glob
import json
import os
import select
import struct
import sys


def varint(buf, i):
    shift = result = 0
    while True:
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, i
        shift += 7


def fields(buf):
    """(field number, wire type, value) of one protobuf message."""
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            val, i = varint(buf, i)
        elif wire == 1:
            val, i = buf[i:i + 8], i + 8
        elif wire == 2:
            n, i = varint(buf, i)
            val, i = buf[i:i + n], i + n
        elif wire == 5:
            val, i = buf[i:i + 4], i + 4
        else:
            return
        yield num, wire, val


def scalars(event):
    """(step, tag, value) of each simple_value in one Event (tensorboard/compat/proto/event.proto)."""
    step, out = 0, []
    for num, wire, val in fields(event):
        if num == 2 and wire == 0:        # Event.step
            step = val
        elif num == 5 and wire == 2:      # Event.summary
            for vnum, vwire, v in fields(val):
                if vnum != 1 or vwire != 2:   # Summary.value
                    continue
                tag, x = None, None
                for f, w, y in fields(v):
                    if f == 1 and w == 2:     # Value.tag
                        tag = y.decode("utf-8", "replace")
                    elif f == 2 and w == 5:   # Value.simple_value
                        x = struct.unpack("<f", y)[0]
                if tag is not None and x is not None:
                    out.append((tag, x))
    return [(step, t, x) for t, x in out]


class EventTail:
    """Follows the event files of a directory; returns the scalars appended since the last call."""

    def __init__(self, directory):
        self.directory, self.offsets = directory, {}

    def poll(self):
        out = []
        for path in sorted(glob.glob(os.path.join(self.directory, "events.out.tfevents.*"))):
            with open(path, "rb") as f:
                f.seek(self.offsets.get(path, 0))
                data = f.read()
            i = 0
            while len(data) - i >= 12:
                (n,) = struct.unpack("<Q", data[i:i + 8])
                if len(data) - i < 12 + n + 4:
                    break                              # a record still being written
                out.extend(scalars(data[i + 12:i + 12 + n]))
                i += 12 + n + 4
            self.offsets[path] = self.offsets.get(path, 0) + i
        return out


def main():
    directory = os.environ.get("FLATLINE_LOG_TENSORBOARD") or os.path.join(
        os.environ.get("FLATLINE_RUN_DIR", "."), "formats", "tensorboard")
    tail, peak, done = EventTail(directory), 0.0, False
    stdin_open = True
    while stdin_open:
        ready, _, _ = select.select([sys.stdin], [], [], 0.2)
        if ready and not sys.stdin.readline():
            stdin_open = False                         # the run is over: a last look at the file
        for step, tag, value in tail.poll():
            if done or tag != "train/learning_rate":
                continue
            peak = max(peak, value)
            if value == 0 and peak > 0:
                print(json.dumps({"cause": "lr_zero", "step": step,
                                  "evidence": [f"train/learning_rate = 0 at step {step} (peak {peak:.3g})"]}),
                      flush=True)
                done = True


if __name__ == "__main__":
    main()
