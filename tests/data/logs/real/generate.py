#!/usr/bin/env python3
"""Writes tests/data/logs/real/: logs written by the real libraries (transformers Trainer, Lightning's
CSVLogger and TensorBoardLogger, torch.utils.tensorboard, wandb offline), each reproducing for real one
cause of a flat loss those stacks can express, or a healthy twin. Run by generate.sh (its own pinned
virtual environment), on CPU, never by CI; the tests read the small outputs it keeps and assert the
verdicts in labels.json.

Every case trains a tiny randomly initialised model on synthetic data (no download): a 4-way sequence
classifier whose label is the first token modulo 4 (learnable), or random (independent of the inputs).
    python3 generate.py [CASE ...]        # default: every case
"""
import contextlib
import copy
import datetime
import glob
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SEQ, VOCAB, CLASSES = 16, 64, 4
LABELS = {}  # case -> label (written to labels.json)


def label(case, library, cause, files, story, rank=None, expect_format=None):
    LABELS[case] = {"library": library, "cause": cause, "rank": rank, "files": files, "story": story,
                    "format": expect_format}


def out_dir(case):
    d = os.path.join(HERE, case)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


def keep(src, case, name=None):
    """Copies one small output into the case directory (relative name kept where given)."""
    dst = os.path.join(HERE, case, name or os.path.basename(src))
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    shutil.copyfile(src, dst)
    return os.path.relpath(dst, os.path.join(HERE, case))


# --- data and model -------------------------------------------------------------------------------------
def dataset(n, seed, rule="learnable", noise=0.0):
    import torch
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, VOCAB, (n, SEQ), generator=g)
    if rule == "learnable":
        y = x[:, 0] % CLASSES
    else:  # labels independent of the inputs: the best a model can do is the prior, ln 4
        y = torch.randint(0, CLASSES, (n,), generator=g)
    if noise:
        flip = torch.rand(n, generator=g) < noise
        y = torch.where(flip, torch.randint(0, CLASSES, (n,), generator=g), y)
    return x, y


class HfData:
    """A map-style dataset of dicts, as the Trainer expects."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return {"input_ids": self.x[i], "attention_mask": self.x[i] * 0 + 1, "labels": self.y[i]}


def tiny_bert(seed):
    import torch
    from transformers import BertConfig, BertForSequenceClassification
    torch.manual_seed(seed)
    cfg = BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=SEQ, num_labels=CLASSES)
    return BertForSequenceClassification(cfg)


class TinyNet:
    """A plain torch classifier (embedding + MLP) for the torch.utils.tensorboard cases."""

    @staticmethod
    def make(seed, width=64):
        import torch
        torch.manual_seed(seed)
        return torch.nn.Sequential(torch.nn.Embedding(VOCAB, 16), torch.nn.Flatten(),
                                   torch.nn.Linear(16 * SEQ, width), torch.nn.GELU(), torch.nn.Linear(width, CLASSES))


def norm(tensors):
    import torch
    return math.sqrt(sum(float(t.detach().float().pow(2).sum()) for t in tensors))


# --- transformers Trainer ---------------------------------------------------------------------------------
def hf_args(out, **kw):
    from transformers import TrainingArguments
    base = dict(output_dir=out, per_device_train_batch_size=16, learning_rate=1e-3, logging_steps=5,
                logging_first_step=True, save_strategy="no", report_to=["tensorboard"], use_cpu=True, seed=7,
                disable_tqdm=True, dataloader_num_workers=0, warmup_steps=20, weight_decay=0.0)
    base.update(kw)
    return TrainingArguments(**base)


def hf_outputs(work, case, keep_tb=False):
    """trainer_state.json (save_state) and the TensorBoard event file the Trainer wrote."""
    files = [keep(os.path.join(work, "trainer_state.json"), case)]
    if keep_tb:
        for ev in sorted(glob.glob(os.path.join(work, "**", "*tfevents*"), recursive=True)):
            files.append(keep(ev, case, os.path.join("tb", os.path.basename(ev))))
    return files


def hf_train(work, args, train, optimizers=(None, None), resume=None, callbacks=None):
    from transformers import Trainer
    t = Trainer(model=tiny_bert(7), args=args, train_dataset=train, optimizers=optimizers, callbacks=callbacks)
    t.train(resume_from_checkpoint=resume)
    t.save_state()
    return t


def case_hf_schedule_too_short():
    """The schedule is sized for 150 of the run's 400 steps (num_training_steps computed from one epoch
    of a smaller dataset): a linear decay reaches 0 at step 150 and stays there."""
    import torch
    from transformers import get_linear_schedule_with_warmup
    case = "hf-schedule-too-short"
    out_dir(case)
    with tempfile.TemporaryDirectory() as work:
        x, y = dataset(8000, 1)
        model = tiny_bert(7)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
        sched = get_linear_schedule_with_warmup(opt, num_warmup_steps=20, num_training_steps=150)
        from transformers import Trainer
        t = Trainer(model=model, args=hf_args(work, max_steps=400), train_dataset=HfData(x, y), optimizers=(opt, sched))
        t.train()
        t.save_state()
        files = hf_outputs(work, case, keep_tb=True)
    label(case, "transformers Trainer", "lr_zero", files,
          "get_linear_schedule_with_warmup(num_training_steps=150) on a 400-step run: lr 0 from step 150")


def case_hf_finished_scheduler_on_resume():
    """A 200-step run whose PolynomialLR(total_iters=200) ends at lr 0; resumed for 400 steps with a new
    scheduler, resume_from_checkpoint restores the finished one's state (total_iters=200): lr stays 0."""
    import torch
    from transformers import Trainer
    case = "hf-finished-scheduler-on-resume"
    out_dir(case)
    with tempfile.TemporaryDirectory() as work:
        x, y = dataset(8000, 2)
        for max_steps, resume in ((200, None), (400, True)):
            model = tiny_bert(7)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
            sched = torch.optim.lr_scheduler.PolynomialLR(opt, total_iters=max_steps, power=1.0)
            args = hf_args(work, max_steps=max_steps, save_strategy="steps", save_steps=200, warmup_steps=0)
            t = Trainer(model=model, args=args, train_dataset=HfData(x, y), optimizers=(opt, sched))
            t.train(resume_from_checkpoint=resume)
        t.save_state()
        files = hf_outputs(work, case, keep_tb=True)  # two event files: the first run's and the resumed one's
    label(case, "transformers Trainer", "lr_zero", files,
          "resume_from_checkpoint restores PolynomialLR(total_iters=200) into a 400-step run: lr 0 after step 200")


def case_hf_resume_replays_epoch():
    """Resumed mid-epoch with ignore_data_skip=True: the data loader starts the epoch over, so the
    batches of steps 101..150 are seen again; the logged epoch goes back while the step advances."""
    from transformers import Trainer
    case = "hf-resume-replays-epoch"
    out_dir(case)
    with tempfile.TemporaryDirectory() as work:
        x, y = dataset(3200, 3, noise=0.1)   # 200 steps per epoch
        for max_steps, resume, skip in ((300, None, False), (600, True, True)):
            args = hf_args(work, max_steps=max_steps, save_strategy="steps", save_steps=300, ignore_data_skip=skip,
                           lr_scheduler_type="constant_with_warmup", learning_rate=5e-4)
            t = Trainer(model=tiny_bert(7), args=args, train_dataset=HfData(x, y))
            t.train(resume_from_checkpoint=resume)
        t.save_state()
        files = hf_outputs(work, case)
    label(case, "transformers Trainer", "data_replay", files,
          "resumed at step 300 (epoch 1.5) with ignore_data_skip=True: the epoch restarts at 1.0, batches replay")


def case_hf_healthy_warmup_from_zero():
    from transformers import Trainer
    case = "hf-healthy-warmup-from-zero"
    out_dir(case)
    with tempfile.TemporaryDirectory() as work:
        x, y = dataset(8000, 4)
        args = hf_args(work, max_steps=400, warmup_steps=40, lr_scheduler_type="linear")
        t = Trainer(model=tiny_bert(7), args=args, train_dataset=HfData(x, y))
        t.train()
        t.save_state()
        files = hf_outputs(work, case)
    label(case, "transformers Trainer", "healthy", files, "linear warmup from lr 0 over 40 steps, linear decay to 0 at the end")


def case_hf_healthy_cosine_tail():
    from transformers import Trainer
    case = "hf-healthy-cosine-tail"
    out_dir(case)
    with tempfile.TemporaryDirectory() as work:
        x, y = dataset(8000, 5)
        args = hf_args(work, max_steps=400, warmup_steps=20, lr_scheduler_type="cosine")
        t = Trainer(model=tiny_bert(7), args=args, train_dataset=HfData(x, y))
        t.train()
        t.save_state()
        files = hf_outputs(work, case)
    label(case, "transformers Trainer", "healthy", files, "cosine schedule down to 0 at the last step")


def case_hf_healthy_converged():
    from transformers import Trainer
    case = "hf-healthy-converged"
    out_dir(case)
    with tempfile.TemporaryDirectory() as work:
        x, y = dataset(8000, 6, noise=0.3)   # the loss floor is the label noise
        args = hf_args(work, max_steps=500, warmup_steps=20, lr_scheduler_type="constant_with_warmup")
        t = Trainer(model=tiny_bert(7), args=args, train_dataset=HfData(x, y))
        t.train()
        t.save_state()
        files = hf_outputs(work, case)
    label(case, "transformers Trainer", "healthy", files, "descends, then flat at the label-noise floor (converged)")


def case_hf_uniform_predictor():
    from transformers import Trainer
    case = "hf-uniform-predictor"
    out_dir(case)
    with tempfile.TemporaryDirectory() as work:
        x, y = dataset(8000, 7, rule="random")
        args = hf_args(work, max_steps=400, warmup_steps=20, lr_scheduler_type="constant_with_warmup", learning_rate=3e-4)
        t = Trainer(model=tiny_bert(7), args=args, train_dataset=HfData(x, y))
        t.train()
        t.save_state()
        files = hf_outputs(work, case)
    label(case, "transformers Trainer", "unexplained_plateau", files,
          "labels independent of the inputs: the loss sits at ln 4 = 1.386 from start to end")


def case_hf_wandb_offline():
    """The same schedule-too-short run logged to W&B offline (report_to=wandb, WANDB_MODE=offline)."""
    import torch
    from transformers import Trainer, get_linear_schedule_with_warmup
    case = "wandb-offline-schedule-too-short"
    out_dir(case)
    with tempfile.TemporaryDirectory() as work:
        os.environ["WANDB_DIR"] = work
        x, y = dataset(8000, 1)
        model = tiny_bert(7)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
        sched = get_linear_schedule_with_warmup(opt, num_warmup_steps=20, num_training_steps=150)
        args = hf_args(os.path.join(work, "out"), max_steps=400, report_to=["wandb"], run_name="schedule-too-short")
        t = Trainer(model=model, args=args, train_dataset=HfData(x, y), optimizers=(opt, sched))
        t.train()
        import wandb
        wandb.finish()
        runs = sorted(glob.glob(os.path.join(work, "wandb", "offline-run-*")))
        run = runs[-1]
        wb = glob.glob(os.path.join(run, "*.wandb"))[0]
        rel = os.path.join("wandb", os.path.basename(run), os.path.basename(wb))
        files = [keep(wb, case, rel)]
    label(case, "transformers Trainer + wandb (offline)", "lr_zero", files,
          "W&B offline run directory of the schedule-too-short run: lr 0 from step 150")


def case_hf_wandb_offline_healthy():
    from transformers import Trainer
    case = "wandb-offline-healthy"
    out_dir(case)
    with tempfile.TemporaryDirectory() as work:
        os.environ["WANDB_DIR"] = work
        x, y = dataset(8000, 4)
        args = hf_args(os.path.join(work, "out"), max_steps=400, warmup_steps=40, report_to=["wandb"], run_name="healthy")
        t = Trainer(model=tiny_bert(7), args=args, train_dataset=HfData(x, y))
        t.train()
        import wandb
        wandb.finish()
        run = sorted(glob.glob(os.path.join(work, "wandb", "offline-run-*")))[-1]
        wb = glob.glob(os.path.join(run, "*.wandb"))[0]
        files = [keep(wb, case, os.path.join("wandb", os.path.basename(run), os.path.basename(wb)))]
    label(case, "transformers Trainer + wandb (offline)", "healthy", files, "warmup from lr 0, linear decay")


def case_hf_ddp_stall():
    """Two Gloo ranks under torchrun; rank 1 stops in a callback at step 60 for longer than the
    collective timeout (ddp_timeout=15 s): rank 0's next all-reduce times out, torchrun ends the job
    and prints its failure summary. What a job's console log holds."""
    case = "hf-ddp-stall"
    out_dir(case)
    with tempfile.TemporaryDirectory() as work:
        log = os.path.join(work, "console.log")
        env = dict(os.environ, OMP_NUM_THREADS="1")
        with open(log, "wb") as f:
            subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                            "29611", __file__, "--worker", "hf_ddp_stall", work],
                           stdout=f, stderr=subprocess.STDOUT, env=env, timeout=600, check=False)
        files = [keep(log, case)]
    label(case, "transformers Trainer + torchrun (2 Gloo ranks)", "run_not_alive", files,
          "rank 1 stalls at step 60 past ddp_timeout=15 s: Gloo timeout on rank 0, torchrun failure summary",
          expect_format="console")


def worker_hf_ddp_stall(work):
    import torch.distributed as dist
    from transformers import Trainer, TrainerCallback
    rank = int(os.environ["RANK"])
    # The process group the Trainer (accelerate) then uses, with the collective timeout of ddp_timeout.
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=15))

    class Stall(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            if rank == 1 and state.global_step == 60:
                time.sleep(45)

    x, y = dataset(8000, 8)
    args = hf_args(os.path.join(work, "out"), max_steps=200, ddp_backend="gloo", ddp_timeout=15, report_to=[],
                   disable_tqdm=False, per_device_train_batch_size=8)
    t = Trainer(model=tiny_bert(7), args=args, train_dataset=HfData(x, y), callbacks=[Stall()])
    t.train()


# --- Lightning --------------------------------------------------------------------------------------------
def lightning_module(manual_bug, accumulate, lr=1e-3, warmup=20):
    import torch
    import lightning as L

    class Net(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = TinyNet.make(7)
            self.automatic_optimization = not manual_bug

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = torch.nn.functional.cross_entropy(self.net(x), y)
            self.log("train_loss", loss, on_step=True, on_epoch=True)
            if manual_bug:
                opt = self.optimizers()
                sch = self.lr_schedulers()
                self.manual_backward(loss / accumulate)
                if (batch_idx + 1) % accumulate == 0:
                    opt.step()
                    opt.zero_grad()
                # The bug: the micro-batch index modulo the accumulation is never equal to it.
                if batch_idx % accumulate == accumulate:
                    sch.step()
            return loss

        def configure_optimizers(self):
            opt = torch.optim.AdamW(self.parameters(), lr=lr)
            sch = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, s / warmup))
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sch, "interval": "step"}}

    return Net()


def lightning_run(case, manual_bug, cause, story, keep_tb):
    import torch
    import lightning as L
    from lightning.pytorch.callbacks import LearningRateMonitor
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
    out_dir(case)
    with tempfile.TemporaryDirectory() as work:
        x, y = dataset(12800, 9)
        loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=16, shuffle=True,
                                             generator=torch.Generator().manual_seed(1))
        accumulate = 4
        trainer = L.Trainer(max_steps=200, accelerator="cpu", devices=1, log_every_n_steps=4,
                            logger=[CSVLogger(work, name="csv"), TensorBoardLogger(work, name="tb")],
                            callbacks=[LearningRateMonitor(logging_interval="step")], enable_checkpointing=False,
                            enable_progress_bar=False, enable_model_summary=False,
                            accumulate_grad_batches=1 if manual_bug else accumulate)
        L.seed_everything(7)
        trainer.fit(lightning_module(manual_bug, accumulate), loader)
        files = [keep(glob.glob(os.path.join(work, "csv", "version_*", "metrics.csv"))[0], case,
                      "lightning_logs/version_0/metrics.csv")]
        for ev in glob.glob(os.path.join(work, "tb", "version_*", "*tfevents*")) if keep_tb else []:
            files.append(keep(ev, case, os.path.join("tb", os.path.basename(ev))))
    label(case, "Lightning (CSVLogger, TensorBoardLogger)" if keep_tb else "Lightning (CSVLogger)", cause, files, story)


def case_lightning_scheduler_never_steps():
    lightning_run("lightning-scheduler-never-steps", True, "lr_zero",
                  "manual optimization with 4 micro-batches: sch.step() under batch_idx % 4 == 4, never true; "
                  "warmup from lr 0 never starts", keep_tb=True)


def case_lightning_healthy_accumulation():
    lightning_run("lightning-healthy-accumulation", False, "healthy",
                  "accumulate_grad_batches=4, warmup from lr 0 stepped by Lightning", keep_tb=False)


# --- torch.utils.tensorboard: plain PyTorch loops -----------------------------------------------------------
def amp_run(case, mode, cause, story, steps=160):
    """fp16 autocast on CPU with torch.amp.GradScaler('cpu'), scalars logged every 2nd step. mode: collapse
    (an activation overflows fp16 from step 50, so the scaler halves every step), clamped (the script
    forces the scale to 2^-16 from step 50: scaler.update(new_scale=...)), search (init_scale 2^28: the
    scaler's initial search)."""
    import torch
    from torch.utils.tensorboard import SummaryWriter
    out_dir(case)
    with tempfile.TemporaryDirectory() as work:
        w = SummaryWriter(os.path.join(work, "tb"))
        x, y = dataset(9600, 10)
        model = TinyNet.make(7, width=64)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 20))
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** (28 if mode == "search" else 16))
        for step in range(1, steps + 1):
            i = (step * 32) % (len(y) - 32)
            xb, yb = x[i:i + 32], y[i:i + 32]
            with torch.autocast("cpu", dtype=torch.float16):
                h = model[0](xb)
                if mode == "collapse" and step >= 50:
                    h = h * 1e5   # the layer's output overflows fp16: inf in the forward from here on
                logits = model[4](model[3](model[2](model[1](h))))
                loss = torch.nn.functional.cross_entropy(logits.float(), yb)
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            grads = [p.grad for p in model.parameters() if p.grad is not None]
            gn = norm(grads)
            zeros = sum(int((g == 0).sum()) for g in grads) / sum(g.numel() for g in grads)
            used = scaler.get_scale()
            scaler.step(opt)
            if mode == "clamped" and step >= 50:
                scaler.update(new_scale=2.0 ** -16)
            else:
                scaler.update()
            skipped = scaler.get_scale() < used
            if not skipped:
                sched.step()
            opt.zero_grad(set_to_none=True)
            if step % 2:
                continue
            w.add_scalar("train/loss", loss.item(), step)
            w.add_scalar("train/lr", sched.get_last_lr()[0], step)
            w.add_scalar("train/loss_scale", used, step)
            if math.isfinite(gn):
                w.add_scalar("train/grad_norm", gn, step)
            w.add_scalar("train/grad_zero_frac", zeros, step)
        w.close()
        files = [keep(ev, case, os.path.join("tb", os.path.basename(ev)))
                 for ev in glob.glob(os.path.join(work, "tb", "*tfevents*"))]
    label(case, "torch.utils.tensorboard + torch.amp.GradScaler('cpu')", cause, files, story)


def case_tb_gradscaler_collapse():
    amp_run("tb-gradscaler-collapse", "collapse", "loss_scale_collapse",
            "an fp16 activation overflows from step 50: GradScaler skips and halves every step")


def case_tb_gradscaler_clamped():
    amp_run("tb-gradscaler-clamped", "clamped", "loss_scale_collapse",
            "the scale is forced to 2^-16 from step 50 (no overflow): a third of the gradient elements underflow to exactly 0")


def case_tb_gradscaler_initial_search():
    amp_run("tb-gradscaler-initial-search", "search", "healthy",
            "init_scale 2^28: the scaler halves for its first steps until the gradients fit, then trains")


def case_tb_optimizer_not_updating():
    """The optimizer was built over the model's parameters, then the model was re-wrapped (a copy, as
    FSDP's flat parameters are; huggingface/accelerate#2665): gradients flow, lr is set, nothing moves."""
    import torch
    from torch.utils.tensorboard import SummaryWriter
    case = "tb-optimizer-not-updating"
    out_dir(case)
    with tempfile.TemporaryDirectory() as work:
        w = SummaryWriter(os.path.join(work, "tb"))
        x, y = dataset(9600, 11)
        model = TinyNet.make(7)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        model = copy.deepcopy(model)  # the wrapper's parameters are not the optimizer's
        for step in range(1, 201):
            i = (step * 32) % (len(y) - 32)
            before = [p.detach().clone() for p in model.parameters()]
            loss = torch.nn.functional.cross_entropy(model(x[i:i + 32]), y[i:i + 32])
            loss.backward()
            gn = norm([p.grad for p in model.parameters()])
            opt.step()
            upd = norm([p.detach() - b for p, b in zip(model.parameters(), before)])
            model.zero_grad(set_to_none=True)
            if step % 2:
                continue
            w.add_scalar("train/loss", loss.item(), step)
            w.add_scalar("train/learning_rate", opt.param_groups[0]["lr"], step)
            w.add_scalar("train/grad_norm", gn, step)
            w.add_scalar("train/param_norm", norm(model.parameters()), step)
            w.add_scalar("train/update_norm", upd, step)
        w.close()
        files = [keep(ev, case, os.path.join("tb", os.path.basename(ev)))
                 for ev in glob.glob(os.path.join(work, "tb", "*tfevents*"))]
    label(case, "torch.utils.tensorboard", "unexplained_plateau", files,
          "AdamW holds the pre-wrap parameters: grad norm > 0, lr 1e-3, update norm 0, parameter norm constant")


def case_tb_ddp(zeroed):
    """Two Gloo ranks (torch.multiprocessing), DDP with a communication hook that logs each rank's
    gradient norm before the all-reduce; `zeroed`: rank 1's hook zeroes its bucket first (a rank that
    sends zeros). Each rank writes its own SummaryWriter under tb/rank_<r>/."""
    case = "tb-ddp-zeroed-rank" if zeroed else "tb-ddp-healthy"
    out_dir(case)
    with tempfile.TemporaryDirectory() as work:
        env = dict(os.environ, OMP_NUM_THREADS="1")
        subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                        "29612", __file__, "--worker", "tb_ddp", work, "1" if zeroed else "0"],
                       env=env, timeout=600, check=True, stdout=subprocess.DEVNULL)
        files = []
        for ev in sorted(glob.glob(os.path.join(work, "tb", "rank_*", "*tfevents*"))):
            r = os.path.basename(os.path.dirname(ev))
            files.append(keep(ev, case, os.path.join("tb", r, os.path.basename(ev))))
    if zeroed:
        label(case, "torch.utils.tensorboard + DDP (2 Gloo ranks)", "zero_grad_rank", files,
              "rank 1's DDP comm hook zeroes its gradient bucket before the all-reduce from step 60", rank=1)
    else:
        label(case, "torch.utils.tensorboard + DDP (2 Gloo ranks)", "healthy", files, "the zeroed-rank run's twin")


def worker_tb_ddp(work, zeroed):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.tensorboard import SummaryWriter
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    w = SummaryWriter(os.path.join(work, "tb", f"rank_{rank}"))
    model = DDP(TinyNet.make(7))
    state = {"step": 0, "local": 0.0}

    def hook(process_group, bucket):
        buf = bucket.buffer()
        if zeroed == "1" and rank == 1 and state["step"] >= 60:
            buf.zero_()
        state["local"] += float(buf.pow(2).sum())
        fut = dist.all_reduce(buf, group=process_group, async_op=True).get_future()
        return fut.then(lambda f: f.value()[0].div_(world))

    model.register_comm_hook(None, hook)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = dataset(9600, 12 + rank)
    for step in range(1, 121):
        state["step"], state["local"] = step, 0.0
        i = (step * 16) % (len(y) - 16)
        loss = torch.nn.functional.cross_entropy(model(x[i:i + 16]), y[i:i + 16])
        loss.backward()
        gn = norm([p.grad for p in model.parameters()])
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step % 2:
            continue
        w.add_scalar("train/loss", loss.item(), step)
        w.add_scalar("train/lr", 1e-3, step)
        w.add_scalar("train/grad_norm", gn, step)
        w.add_scalar("train/local_grad_norm", math.sqrt(state["local"]), step)
    w.close()
    dist.destroy_process_group()


CASES = {
    "hf-schedule-too-short": case_hf_schedule_too_short,
    "hf-finished-scheduler-on-resume": case_hf_finished_scheduler_on_resume,
    "hf-resume-replays-epoch": case_hf_resume_replays_epoch,
    "hf-healthy-warmup-from-zero": case_hf_healthy_warmup_from_zero,
    "hf-healthy-cosine-tail": case_hf_healthy_cosine_tail,
    "hf-healthy-converged": case_hf_healthy_converged,
    "hf-uniform-predictor": case_hf_uniform_predictor,
    "hf-ddp-stall": case_hf_ddp_stall,
    "wandb-offline-schedule-too-short": case_hf_wandb_offline,
    "wandb-offline-healthy": case_hf_wandb_offline_healthy,
    "lightning-scheduler-never-steps": case_lightning_scheduler_never_steps,
    "lightning-healthy-accumulation": case_lightning_healthy_accumulation,
    "tb-gradscaler-collapse": case_tb_gradscaler_collapse,
    "tb-gradscaler-clamped": case_tb_gradscaler_clamped,
    "tb-gradscaler-initial-search": case_tb_gradscaler_initial_search,
    "tb-optimizer-not-updating": case_tb_optimizer_not_updating,
    "tb-ddp-zeroed-rank": lambda: case_tb_ddp(True),
    "tb-ddp-healthy": lambda: case_tb_ddp(False),
}


def run_one(name):
    import torch
    torch.set_num_threads(1)
    t0 = time.time()
    CASES[name]()
    import lightning
    import tensorboard
    import transformers
    import wandb
    labels_path = os.path.join(HERE, "labels.json")
    data = {"written_by": {}, "cases": {}}
    if os.path.exists(labels_path):
        with open(labels_path) as f:
            data = json.load(f)
    data["written_by"] = {"torch": torch.__version__, "transformers": transformers.__version__,
                          "lightning": lightning.__version__, "tensorboard": tensorboard.__version__,
                          "wandb": wandb.__version__, "python": sys.version.split()[0]}
    data["cases"].update(LABELS)
    data["cases"] = dict(sorted(data["cases"].items()))
    with open(labels_path, "w") as f:
        json.dump(data, f, indent=2)
        f.write("\n")
    print(f"{name}: {time.time() - t0:.1f} s", flush=True)


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        {"hf_ddp_stall": worker_hf_ddp_stall, "tb_ddp": worker_tb_ddp}[sys.argv[2]](*sys.argv[3:])
    elif len(sys.argv) == 3 and sys.argv[1] == "--one":
        run_one(sys.argv[2])
    else:
        # One process per case: the libraries keep global state (W&B's run, seeds, thread pools).
        for name in sys.argv[1:] or list(CASES):
            if name not in CASES:
                sys.exit(f"unknown case {name!r} (cases: {', '.join(CASES)})")
            subprocess.run([sys.executable, __file__, "--one", name], check=True)


if __name__ == "__main__":
    main()
