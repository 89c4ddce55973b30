"""The probe's cost in instructions (docs/DESIGN.md §16), where wall time moves more between runs than
the differences measured (bench/README.md "The probe's overhead"): the job of bench/probe_overhead.py
(TinyLM, or transformers' tiny GPT-2; one process, one CPU thread, AdamW), N steps, the probe on or off,
run under callgrind; a step's count is the difference of two runs' totals over their difference in
steps, so the import and the first steps cancel out:

    for s in 20 120; do for p in on off; do
      PYTHONHASHSEED=0 PYTHONPATH=python valgrind --tool=callgrind --callgrind-out-file=/tmp/cg-$p-$s.out \\
        .venv/bin/python bench/probe_instructions.py $p $s [tiny|gpt2] 2>&1 | grep Collected
    done; done
    # a step: (I(on, 120) - I(on, 20)) / 100 against the same for off

(~3-8 min a run for TinyLM on 2 cores. PYTHONHASHSEED=0: the interpreter's string hashes, random per
process otherwise, move a count by up to ~0.1 M a step between identical runs.) `ddp` runs the tests'
DDP job (TinyLM on 2 Gloo ranks, a process each; bench/probe_overhead.py --ranks 2), each rank under
the command --wrap gives ({rank}: 0, 1):

    PYTHONHASHSEED=0 PYTHONPATH=python .venv/bin/python bench/probe_instructions.py on 70 ddp \\
      --wrap='valgrind --tool=callgrind --callgrind-out-file=/tmp/cg-on-70-r{rank}.out'

The probe's threads' work is counted too (callgrind's --separate-threads=yes gives each thread's apart);
under valgrind a step takes ~50 times as long, so the recorder thread takes fewer records at a time than
it would (it works once every FLUSH_S), and it may be starved: compare the sum over threads.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import probe_overhead as pb  # noqa: E402


def ddp_main(on, steps, wrap):
    """The tests' DDP job (probe_overhead.DDPJob: TinyLM on 2 Gloo ranks, the sampler wrapper, clipping),
    one copy a process, probed or not: this script again per rank, each under `wrap` ({rank} filled in)."""
    if "LOCAL_RANK" not in os.environ:
        import shlex
        import socket
        import subprocess
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        env = dict(os.environ, WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
        argv = [a for a in sys.argv if not a.startswith("--wrap=")]
        procs = [subprocess.Popen(shlex.split(wrap.format(rank=r)) + [sys.executable] + argv,
                                  env=dict(env, RANK=str(r), LOCAL_RANK=str(r))) for r in range(2)]
        codes = [p.wait() for p in procs]
        if any(codes):
            sys.exit(f"a rank failed: exit statuses {codes}")
        return
    torch.distributed.init_process_group("gloo")
    job = pb.DDPJob(on, pb.ByteWindows())
    for _ in range(steps):
        job.step()
    if job.probe:
        job.probe.close()
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


def main():
    on, steps = sys.argv[1] == "on", int(sys.argv[2])
    model = sys.argv[3] if len(sys.argv) > 3 and not sys.argv[3].startswith("--") else "tiny"
    torch.set_num_threads(1)
    if model == "ddp":
        wrap = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--wrap=")), "")
        return ddp_main(on, steps, wrap)
    job = pb.Job(pb.TinyLM if model == "tiny" else pb.tiny_gpt2, on, pb.ByteWindows())
    for _ in range(steps):
        job.step()
    if job.probe:
        job.probe.close()


if __name__ == "__main__":
    main()
