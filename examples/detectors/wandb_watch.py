#!/usr/bin/env python3
"""A file watcher that tails a W&B offline run's transaction log as the client writes it.

A team's alert on an offline (or not yet synced) W&B run reads wandb/offline-run-*/run-*.wandb while it
grows. This one needs no wandb package: it follows the LevelDB-framed log (a 7-byte ":W&B" header,
then 32 KiB blocks of chunks: crc32, length, type; wandb/sdk/internal/datastore.py) and decodes the
HistoryRecord of each Record by protobuf's wire format. It never reads stdin (it closes it), polls every
0.2 s, and alarms lr_zero once `train/learning_rate` is 0 after having been above 0, once.

  build/flatline score --formats wandb-run --detector wbwatch='python3 examples/detectors/wandb_watch.py'
"""
import glob
import json
import os
import signal
import sys
import time
import zlib

BLOCK, HEADER = 32768, 7


def varint(buf, i):
    shift = value = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, i
        shift += 7


def fields(buf):
    """(field number, value) of one protobuf message: ints and length-delimited bytes."""
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            value, i = varint(buf, i)
        elif wire == 2:
            n, i = varint(buf, i)
            value, i = buf[i:i + n], i + n
        elif wire in (1, 5):
            value, i = buf[i:i + (8 if wire == 1 else 4)], i + (8 if wire == 1 else 4)
        else:
            return
        yield num, value


def history(record):
    """{key: value} of a Record's HistoryRecord (field 2), else None."""
    for num, value in fields(record):
        if num == 2:
            row = {}
            for inum, item in fields(value):
                if inum == 1:
                    parts = dict((n, v) for n, v in fields(item) if n in (1, 16))
                    row[parts.get(1, b"").decode()] = json.loads(parts.get(16, b"null"))
            return row
    return None


class LogTail:
    """The records appended to one .wandb file since the last call (whole chunks only)."""

    def __init__(self, path):
        self.path, self.pos, self.partial = path, HEADER, b""

    def records(self):
        with open(self.path, "rb") as f:
            data = f.read()
        out = []
        while True:
            left = BLOCK - self.pos % BLOCK
            if left < 7:
                self.pos += left
                continue
            if self.pos + 7 > len(data):
                return out
            crc = int.from_bytes(data[self.pos:self.pos + 4], "little")
            n = int.from_bytes(data[self.pos + 4:self.pos + 6], "little")
            kind = data[self.pos + 6]
            if crc == 0 and n == 0 and kind == 0:
                self.pos += left
                continue
            if self.pos + 7 + n > len(data):
                return out  # the client is still writing it
            chunk = data[self.pos + 7:self.pos + 7 + n]
            self.pos += 7 + n
            if zlib.crc32(bytes([kind]) + chunk) != crc:
                continue
            if kind == 1:
                out.append(chunk)
            elif kind == 2:
                self.partial = chunk
            else:
                self.partial += chunk
                if kind == 4:
                    out.append(self.partial)


os.close(0)  # a watcher: stdin is not its input
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # the end of the run
root = os.environ["FLATLINE_LOG_WANDB_RUN"]
tails, peak, alarmed = {}, 0.0, False
while True:
    for path in sorted(glob.glob(os.path.join(root, "**", "run-*.wandb"), recursive=True)):
        tail = tails.setdefault(path, LogTail(path))
        for record in tail.records():
            row = history(record)
            if not row or alarmed or "train/learning_rate" not in row:
                continue
            lr, step = float(row["train/learning_rate"]), row.get("train/global_step")
            peak = max(peak, lr)
            if peak > 0 and lr == 0:
                alarmed = True
                print(json.dumps({"cause": "lr_zero", "step": step,
                                  "evidence": f"train/learning_rate 0 at step {step} (peak {peak:g})"}), flush=True)
    time.sleep(0.2)
