"""The probe's cost in instructions (docs/DESIGN.md §16), where wall time moves more between runs than
the differences measured (bench/README.md "The probe's overhead"): the job of bench/probe_overhead.py
(TinyLM, or transformers' tiny GPT-2; one process, one CPU thread, AdamW), N steps, the probe on or off,
run under callgrind; a step's count is the difference of two runs' totals over their difference in
steps, so the import and the first steps cancel out:

    for s in 20 120; do for p in on off; do
      PYTHONPATH=python valgrind --tool=callgrind --callgrind-out-file=/tmp/cg-$p-$s.out \\
        .venv/bin/python bench/probe_instructions.py $p $s [tiny|gpt2] 2>&1 | grep Collected
    done; done
    # a step: (I(on, 120) - I(on, 20)) / 100 against the same for off

(~2 min a run for TinyLM, ~6 for GPT-2, on 2 cores.) The recorder thread's work is counted too; under
valgrind it takes each record on its own rather than 20 ms of them, so the probe's count is if anything
high.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import probe_overhead as pb  # noqa: E402


def main():
    on, steps = sys.argv[1] == "on", int(sys.argv[2])
    model = sys.argv[3] if len(sys.argv) > 3 else "tiny"
    torch.set_num_threads(1)
    job = pb.Job(pb.TinyLM if model == "tiny" else pb.tiny_gpt2, on, pb.ByteWindows())
    for _ in range(steps):
        job.step()
    if job.probe:
        job.probe.close()


if __name__ == "__main__":
    main()
