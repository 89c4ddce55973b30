"""A transformers.Trainer with flatline's probe (docs/DESIGN.md §16): one line, callbacks=[FlatlineCallback()].
A tiny randomly initialised GPT-2 (a config, no download) on the fortunes corpus, byte-level.

    torchrun --nproc-per-node 2 examples/trainers/hf_trainer.py
    flatline score scenarios/external --trainer "python examples/trainers/hf_trainer.py"
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import ByteWindows, shape  # noqa: E402
from flatline_probe import FlatlineCallback, load_plan, resuming  # noqa: E402
import torch  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments  # noqa: E402

steps, seed, timeout_s, fp16, device = shape(load_plan())
# the Trainer's own outputs: where flatline gives them a place in the run directory, else beside the telemetry
out = os.environ.get("FLATLINE_TRAINER_DIR", "runs/hf-trainer/trainer")
model = GPT2LMHeadModel(GPT2Config(vocab_size=256, n_positions=32, n_embd=64, n_layer=2, n_head=4,
                                   resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))
args = TrainingArguments(output_dir=out, max_steps=steps, per_device_train_batch_size=8,
                         learning_rate=3e-3, weight_decay=0.1, warmup_steps=5, lr_scheduler_type="cosine",
                         max_grad_norm=1.0, logging_steps=10, save_strategy="no", report_to=[], seed=seed,
                         use_cpu=device.type == "cpu", fp16=fp16, ddp_backend="gloo", ddp_timeout=int(timeout_s),
                         ddp_find_unused_parameters=False, dataloader_num_workers=0, disable_tqdm=True)
# resuming(): the scenario's restart: resume from the last checkpoint the probe asked for
Trainer(model=model, args=args, train_dataset=ByteWindows(as_dict=True),
        callbacks=[FlatlineCallback("runs/hf-trainer")]).train(
            resume_from_checkpoint=True if resuming() else None)
if torch.distributed.is_initialized():  # the Trainer leaves it: a process group alive at exit aborts
    torch.distributed.barrier()  # no rank closes its connections while a peer may still use them
    torch.distributed.destroy_process_group()
