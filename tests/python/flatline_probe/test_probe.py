"""The probe on one process, CPU (docs/DESIGN.md §16): what each step record holds, and each action of a
plan carried out exactly. The 2-rank runs of the example trainers are the probe_e2e_* tests."""
import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

import torch
from torch.utils.data import BatchSampler, DataLoader, SequentialSampler, TensorDataset

from flatline_probe import Probe, attach, load_plan, PlanError, native


def plan(actions=(), lr_factor=(), precision="fp32", steps=8, log_every=1):
    return {"format": "flatline-plan/1", "name": "t", "seed": 0, "world_size": 1, "steps": steps,
            "log_every": log_every, "heartbeat_s": 0.05, "collective_timeout_s": 5, "precision": precision,
            "device": "cpu", "actions": [dict(a, rank=0) for a in actions], "lr_factor": list(lr_factor)}


def records(run_dir):
    with open(os.path.join(run_dir, "telemetry", "rank-0.jsonl")) as f:
        return [json.loads(line) for line in f]


def train(run_dir, p, steps=8, scaler=False, lr=0.1):
    torch.manual_seed(0)
    data = TensorDataset(torch.linspace(-1, 1, 128).reshape(64, 2), torch.ones(64, 1))
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    sc = torch.amp.GradScaler("cpu", init_scale=1024.0) if scaler else None
    probe = attach(run_dir, model, opt, scaler=sc, sampler=BatchSampler(SequentialSampler(data), 4, False), plan=p)
    it = iter(DataLoader(data, batch_sampler=probe.sampler))
    for _ in range(steps):
        x, y = next(it)
        loss = probe.loss(torch.nn.functional.mse_loss(model(x), y))
        opt.zero_grad()
        if sc:
            sc.scale(loss).backward()
            sc.step(opt)
            sc.update()
        else:
            loss.backward()
            opt.step()
    probe.close()
    return [r for r in records(run_dir) if r["kind"] == "step"], records(run_dir), opt


def flaky_sgd(raise_at=(), fail_inside_at=()):
    """An SGD class whose step() raises at its raise_at-th calls in its own code (before SGD.step), and
    fails at its fail_inside_at-th calls inside SGD.step (an lr of None), as a job's transient failures
    would."""
    class Flaky(torch.optim.SGD):
        calls = 0

        def step(self, closure=None):
            Flaky.calls += 1
            if Flaky.calls in raise_at:
                raise RuntimeError("a transient failure")
            if Flaky.calls in fail_inside_at:
                self.param_groups[0]["lr"] = None  # SGD.step fails on it
            return super().step(closure)
    return Flaky


class ProbeTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="probe-test-")
        for k in ("FLATLINE_RUN_DIR", "FLATLINE_PLAN", "FLATLINE_SCENARIO", "RANK", "WORLD_SIZE"):
            os.environ.pop(k, None)

    def test_each_step_record_holds_the_contract_fields(self):
        steps, all_records, _ = train(self.dir, plan())
        self.assertEqual([r["step"] for r in steps], list(range(1, 9)))
        self.assertEqual([r["opt_step"] for r in steps], list(range(1, 9)))
        for r in steps:
            for k in ("loss", "lr", "grad_norm", "local_grad_norm", "grad_zero_frac", "param_norm", "update_norm",
                      "batch_hash", "loss_scale", "step_ms"):
                self.assertIn(k, r)
            self.assertAlmostEqual(r["lr"], 0.1)
            self.assertEqual(r["loss_scale"], 1.0)
            self.assertGreater(r["update_norm"], 0)
        self.assertEqual(len({r["batch_hash"] for r in steps}), 8)  # 8 distinct batches of sample ids
        self.assertEqual(all_records[0]["name"], "run_start")
        self.assertEqual(all_records[-1]["name"], "run_end")

    def test_update_norm_is_what_the_update_changed(self):
        # SGD without momentum: update = lr * grad, so update_norm = lr * grad_norm exactly
        steps, _, _ = train(self.dir, plan())
        for r in steps:
            self.assertLess(abs(r["update_norm"] - 0.1 * r["grad_norm"]), 1e-5 * r["update_norm"])

    def test_a_complex_parameters_norms_count_its_imaginary_parts(self):
        torch.manual_seed(0)
        w = torch.nn.Parameter(torch.randn(6, 3, dtype=torch.complex64))
        b = torch.nn.Parameter(torch.randn(3))
        opt = torch.optim.SGD([w, b], lr=0.1)
        probe = attach(self.dir, None, opt, plan=plan())
        want = []
        for step in range(3):
            x = torch.randn(4, 6, dtype=torch.complex64)
            loss = probe.loss(((x @ w).abs() + b).pow(2).mean())
            opt.zero_grad()
            loss.backward()
            before = [w.detach().clone(), b.detach().clone()]
            grad_sq = float((w.grad.abs() ** 2).sum() + (b.grad ** 2).sum())
            opt.step()
            want.append((grad_sq ** 0.5, float((w.detach().abs() ** 2).sum() + (b.detach() ** 2).sum()) ** 0.5,
                         float(((w.detach() - before[0]).abs() ** 2).sum() + ((b.detach() - before[1]) ** 2).sum()) ** 0.5))
        probe.close()
        steps = [r for r in records(self.dir) if r["kind"] == "step"]
        self.assertEqual(len(steps), 3)
        for r, (g, p, u) in zip(steps, want):
            self.assertAlmostEqual(r["grad_norm"], g, delta=1e-6 * g)
            self.assertAlmostEqual(r["param_norm"], p, delta=1e-6 * p)
            self.assertAlmostEqual(r["update_norm"], u, delta=1e-5 * u)
            self.assertEqual(r["grad_zero_frac"], 0.0)

    def test_the_grad_norm_is_the_gradients_before_an_optimizer_subclass_changes_them(self):
        # Halving.step halves the gradients in place, then calls SGD.step: torch runs the optimizer's hooks
        # around each (SGD.step is wrapped too once any SGD exists); the probe's count once a step, the outer
        import contextlib
        import io

        class Halving(torch.optim.SGD):
            def step(self, closure=None):
                for group in self.param_groups:
                    for p in group["params"]:
                        p.grad.mul_(0.5)
                return super().step(closure)
        torch.optim.SGD([torch.zeros(1, requires_grad=True)])
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
        opt = Halving(model.parameters(), lr=0.05)
        want = []
        with contextlib.redirect_stderr(io.StringIO()):
            probe = attach(self.dir, model, opt, plan=plan(steps=6))
            for _ in range(6):
                loss = probe.loss(model(torch.randn(8, 16)).pow(2).mean())
                opt.zero_grad()
                loss.backward()
                want.append(sum(float((p.grad.double() ** 2).sum()) for p in model.parameters()) ** 0.5)
                opt.step()
            probe.close()
        steps = [r for r in records(self.dir) if r["kind"] == "step"]
        self.assertEqual([(r["step"], r["opt_step"]) for r in steps], [(i, i) for i in range(1, 7)])
        for r, g in zip(steps, want):
            self.assertAlmostEqual(r["grad_norm"], g, delta=1e-6 * g)  # not half of it

    def test_an_optimizer_step_that_raised_does_not_stop_the_steps_after_it_from_being_recorded(self):
        # a step() that raises runs no post-hooks: the probe's count of step() calls in progress must not
        # take the next step() for one nested inside it. Step 2 raises in the subclass's own code (before
        # SGD.step), step 4 inside SGD.step (its hooks ran their pre-hooks, two deep); the job goes on
        torch.optim.SGD([torch.zeros(1, requires_grad=True)])  # SGD.step wrapped in the hooks too
        torch.manual_seed(0)
        model = torch.nn.Linear(2, 1)
        opt = flaky_sgd(raise_at=(2,), fail_inside_at=(4,))(model.parameters(), lr=0.1)
        probe = attach(self.dir, model, opt, plan=plan())
        raised = 0
        for _ in range(7):
            loss = probe.loss(model(torch.ones(4, 2)).square().mean())
            opt.zero_grad()
            loss.backward()
            try:
                opt.step()
            except (RuntimeError, TypeError):
                raised += 1
                opt.param_groups[0]["lr"] = 0.1
        probe.close()
        self.assertEqual(raised, 2)
        steps = [r for r in records(self.dir) if r["kind"] == "step"]
        self.assertEqual([(r["step"], r["opt_step"]) for r in steps], [(i, i) for i in range(1, 6)])
        for r in steps:
            self.assertIn("update_norm", r)

    def test_an_optimizer_step_that_raised_and_is_tried_again_is_measured_once_and_scaled_once(self):
        # the plan halves the lr at step 2, whose step() raises (no post-hook gives the lr back) and is
        # tried again by the job: the retry is scaled once, and the job's lr is its own afterwards
        torch.manual_seed(0)
        model = torch.nn.Linear(2, 1)
        opt = flaky_sgd(raise_at=(2,))(model.parameters(), lr=0.1)
        probe = attach(self.dir, model, opt, plan=plan(lr_factor=[[2, 0.5]]))
        lrs, grad_norms = [], []
        for _ in range(3):
            loss = probe.loss(model(torch.ones(4, 2)).square().mean())
            opt.zero_grad()
            loss.backward()
            grad_norms.append(sum(float((p.grad.double() ** 2).sum()) for p in model.parameters()) ** 0.5)
            try:
                opt.step()
            except RuntimeError:
                opt.step()  # the job tries the update again
            lrs.append(opt.param_groups[0]["lr"])
        probe.close()
        steps = [r for r in records(self.dir) if r["kind"] == "step"]
        self.assertEqual([r["lr"] for r in steps], [0.1, 0.05, 0.1])
        self.assertEqual(lrs, [0.1, 0.1, 0.1])  # not 0.025 (halved twice) for good
        # the retry's gradients are the same: their statistics are taken once, not summed with the first try's
        self.assertEqual([(r["step"], r["opt_step"]) for r in steps], [(1, 1), (2, 2), (3, 3)])
        for r, g in zip(steps, grad_norms):
            self.assertAlmostEqual(r["grad_norm"], g, delta=1e-6 * g)  # not sqrt(2) times it
            self.assertAlmostEqual(r["update_norm"], r["lr"] * g, delta=1e-5 * r["update_norm"])

    def test_lr_factor_scales_the_update_and_gives_the_jobs_lr_back(self):
        steps, _, opt = train(self.dir, plan(lr_factor=[[3, 0.5], [4, 0.0]]))
        self.assertAlmostEqual(steps[2]["lr"], 0.05)
        self.assertEqual(steps[3]["lr"], 0.0)
        self.assertEqual(steps[3]["update_norm"], 0.0)
        self.assertAlmostEqual(steps[4]["lr"], 0.1)
        self.assertAlmostEqual(opt.param_groups[0]["lr"], 0.1)

    def test_a_replayed_batch_comes_again_and_the_sampler_does_not_move_on(self):
        # steps 5..8 train batches 2, 3, 2, 3 (a cycle of 2 from step 3)
        p = plan(actions=[{"from": 5, "to": 5, "batch_index": 2}, {"from": 6, "to": 6, "batch_index": 3},
                          {"from": 7, "to": 7, "batch_index": 2}, {"from": 8, "to": 8, "batch_index": 3}])
        steps, _, _ = train(self.dir, p, steps=10)
        h = [r["batch_hash"] for r in steps]
        self.assertEqual(h[4], h[2])
        self.assertEqual(h[5], h[3])
        self.assertEqual(h[6], h[2])
        self.assertEqual(h[7], h[3])
        self.assertNotIn(h[8], h[:8])  # step 9 trains batch 4, the sampler's next
        clean = train(tempfile.mkdtemp(), plan(), steps=10)[0]
        self.assertEqual(h[8], clean[4]["batch_hash"])

    def test_frozen_logging_repeats_the_last_step_shown(self):
        steps, _, _ = train(self.dir, plan(actions=[{"from": 4, "to": 8, "freeze_logging": True}]))
        self.assertEqual([r["step"] for r in steps], [1, 2, 3, 3, 3, 3, 3, 3])
        self.assertEqual(len({r["loss"] for r in steps[2:]}), 1)
        self.assertEqual(steps[-1]["opt_step"], 8)  # training went on

    def test_an_inf_in_the_gradients_makes_gradscaler_skip_and_halve(self):
        steps, _, _ = train(self.dir, plan(actions=[{"from": 3, "to": 4, "inject_inf": True}], precision="fp16"),
                            scaler=True)
        self.assertEqual([r["skipped"] for r in steps], [False, False, True, True, False, False, False, False])
        self.assertEqual([r["opt_step"] for r in steps], [1, 2, 2, 2, 3, 4, 5, 6])
        self.assertEqual([r["loss_scale"] for r in steps[:6]], [1024.0, 1024.0, 1024.0, 512.0, 256.0, 256.0])
        self.assertNotIn("grad_norm", steps[2])

    def test_the_scale_is_clamped_after_gradscalers_update(self):
        m = 2.0 ** -10
        steps, _, _ = train(self.dir, plan(actions=[{"from": 3, "to": 8, "max_loss_scale": m}], precision="fp16"),
                            scaler=True)
        self.assertEqual(steps[2]["loss_scale"], 1024.0)  # step 3's backward used the scale before the clamp
        self.assertEqual([r["loss_scale"] for r in steps[3:]], [m] * 5)

    def test_flatline_plan_is_read_from_a_scenario(self):
        exe = os.environ.get("FLATLINE_BIN")
        if not exe:
            self.skipTest("FLATLINE_BIN not set")
        scen = os.path.join(os.path.dirname(__file__), "..", "..", "..", "scenarios", "external",
                            "data-replay-cycle-window.yaml")
        os.environ["FLATLINE_SCENARIO"] = scen
        p = load_plan()
        self.assertEqual(p["world_size"], 2)
        cyc = [a["batch_index"] for a in p["actions"] if a["rank"] == 0][:6]
        self.assertEqual(cyc, [19, 20, 21, 22, 19, 20])  # at 20, window 4: step 24 trains batch 19 again
        os.environ["FLATLINE_SCENARIO"] = "/nonexistent.yaml"
        with self.assertRaises(PlanError):
            load_plan()

    def test_a_parameter_changed_outside_the_optimizer_is_not_counted_as_the_update(self):
        # the copy before an update is reused from the last one only while no parameter changed since
        torch.manual_seed(0)
        model = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        probe = attach(self.dir, model, opt, plan=plan())
        x, y = torch.ones(4, 2), torch.zeros(4, 1)
        for i in range(4):
            if i == 2:
                with torch.no_grad():
                    model.weight.add_(10.0)  # an EMA swap, a load_state_dict: not the optimizer's update
            loss = probe.loss(torch.nn.functional.mse_loss(model(x), y))
            opt.zero_grad()
            loss.backward()
            opt.step()
        probe.close()
        steps = [r for r in records(self.dir) if r["kind"] == "step"]
        for r in steps:
            self.assertLess(abs(r["update_norm"] - 0.1 * r["grad_norm"]), 1e-5 * r["update_norm"])

    def test_grad_zero_frac_counts_the_zero_gradients(self):
        # input feature 1 always 0: that weight's gradient is 0, the other weight's and the bias's are not
        torch.manual_seed(0)
        model = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        probe = attach(self.dir, model, opt, plan=plan())
        x = torch.stack([torch.linspace(-1, 1, 4), torch.zeros(4)], 1)
        loss = probe.loss(torch.nn.functional.mse_loss(model(x), torch.ones(4, 1)))
        loss.backward()
        opt.step()
        probe.close()
        (r,) = [r for r in records(self.dir) if r["kind"] == "step"]
        self.assertAlmostEqual(r["grad_zero_frac"], 1 / 3)

    def test_sparse_gradients_are_measured_over_their_values(self):
        # nn.Embedding(sparse=True): rows 1 (twice) and 4 of 10 have gradients, in a sparse COO tensor
        torch.manual_seed(0)
        emb = torch.nn.Embedding(10, 3, sparse=True)
        head = torch.nn.Linear(3, 1)
        opt = torch.optim.SGD(list(emb.parameters()) + list(head.parameters()), lr=0.1)
        probe = attach(self.dir, torch.nn.Sequential(emb, head), opt, plan=plan())
        loss = probe.loss(head(emb(torch.tensor([1, 1, 4]))).square().mean())
        loss.backward()
        dense = [emb.weight.grad.to_dense(), head.weight.grad, head.bias.grad]
        opt.step()
        probe.close()
        (r,) = [r for r in records(self.dir) if r["kind"] == "step"]
        want = sum(float((g.double() ** 2).sum()) for g in dense) ** 0.5
        self.assertAlmostEqual(r["grad_norm"], want, places=6)
        nonzero = sum(int((g != 0).sum()) for g in dense)
        self.assertEqual(nonzero, 6 + 3 + 1)
        self.assertAlmostEqual(r["grad_zero_frac"], 1 - nonzero / 34)

    def test_a_complex_sparse_gradient_is_measured_over_its_values_real_and_imaginary_parts(self):
        # rows 0 and 2 of a 6x3 complex parameter have values; grad_zero_frac counts parts, as a dense one's
        w = torch.nn.Parameter(torch.zeros(6, 3, dtype=torch.complex64))
        b = torch.nn.Parameter(torch.zeros(2))
        opt = torch.optim.SGD([w, b], lr=0.1)
        probe = attach(self.dir, None, opt, plan=plan())
        probe.loss(1.0)
        values = torch.tensor([[1 + 2j, 3j, 0], [0, 0, 4 - 1j]], dtype=torch.complex64)
        w.grad = torch.sparse_coo_tensor(torch.tensor([[0, 2]]), values, (6, 3))
        b.grad = torch.tensor([0.0, 2.0])
        opt.step()
        probe.close()
        (r,) = [r for r in records(self.dir) if r["kind"] == "step"]
        self.assertAlmostEqual(r["grad_norm"], (1 + 4 + 9 + 16 + 1 + 4) ** 0.5, places=6)  # not the real parts'
        self.assertAlmostEqual(r["grad_zero_frac"], 1 - (5 + 1) / (36 + 2))
        self.assertAlmostEqual(r["update_norm"], 0.1 * r["grad_norm"], places=6)

    def test_a_nan_gradient_gives_no_zero_fraction(self):
        torch.manual_seed(0)
        model = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        probe = attach(self.dir, model, opt, plan=plan())
        for i in range(2):
            loss = probe.loss(torch.nn.functional.mse_loss(model(torch.ones(4, 2)), torch.zeros(4, 1)))
            opt.zero_grad()
            loss.backward()
            if i == 1:
                model.bias.grad.fill_(float("nan"))
            opt.step()
        probe.close()
        first, second = [r for r in records(self.dir) if r["kind"] == "step"]
        self.assertEqual(first["grad_zero_frac"], 0.0)
        self.assertNotIn("grad_zero_frac", second)
        self.assertNotIn("grad_norm", second)  # not finite: absent, as every non-finite statistic

    def test_log_every_records_and_measures_one_step_in_n(self):
        steps, _, _ = train(self.dir, plan(log_every=3), steps=9)
        self.assertEqual([r["step"] for r in steps], [3, 6, 9])
        self.assertEqual([r["opt_step"] for r in steps], [3, 6, 9])
        for r in steps:
            self.assertLess(abs(r["update_norm"] - 0.1 * r["grad_norm"]), 1e-5 * r["update_norm"])
            self.assertIn("batch_hash", r)

    def test_a_resume_numbers_the_steps_after_the_checkpoint(self):
        torch.manual_seed(0)
        model = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        probe = attach(self.dir, model, opt, plan=plan(steps=20))
        probe.checkpoint_loaded(10, "ckpt-10")
        for _ in range(2):
            loss = probe.loss(torch.nn.functional.mse_loss(model(torch.ones(4, 2)), torch.zeros(4, 1)))
            opt.zero_grad()
            loss.backward()
            opt.step()
        probe.close()
        rs = records(self.dir)
        self.assertEqual([r["step"] for r in rs if r["kind"] == "step"], [11, 12])
        events = [r["name"] for r in rs if r["kind"] == "event"]
        self.assertEqual(events[:3], ["run_start", "checkpoint_load", "resume"])

    def test_checkpoint_due_once_after_each_multiple_of_checkpoint_every(self):
        p = plan(steps=8)
        p["checkpoint_every"] = 3
        torch.manual_seed(0)
        model = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        probe = attach(self.dir, model, opt, plan=p)
        due = []
        for _ in range(8):
            loss = probe.loss(torch.nn.functional.mse_loss(model(torch.ones(4, 2)), torch.zeros(4, 1)))
            opt.zero_grad()
            loss.backward()
            opt.step()
            if probe.checkpoint_due():
                due.append(probe.step)
                probe.checkpoint_saved(f"ckpt-{probe.step}")
            self.assertFalse(probe.checkpoint_due())  # once
        probe.close()
        self.assertEqual(due, [3, 6])
        saves = [r["step"] for r in records(self.dir) if r.get("name") == "checkpoint_save"]
        self.assertEqual(saves, [3, 6])
        # an event is written behind the records before it: each save right after its step's record
        order = [(r["kind"], r["step"]) for r in records(self.dir) if r["kind"] in ("step", "event")]
        for s in (3, 6):
            self.assertEqual(order[order.index(("step", s)) + 1], ("event", s))

    def test_the_batch_is_hashed_before_the_forward_can_change_it(self):
        # a model that changes its input in place (an in-place dropout on it, say): the hash is the batch's
        import hashlib

        class ZeroesItsInput(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = torch.nn.Linear(2, 1)

            def forward(self, x):
                out = self.lin(x.clone())
                x.zero_()
                return out

        torch.manual_seed(0)
        model = ZeroesItsInput()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        probe = attach(self.dir, model, opt, plan=plan())
        xs = [torch.full((4, 2), float(i + 1)) for i in range(3)]
        stats = native.load()  # its hash is checked against XXH64's in test_native
        want = [stats.xxh64_of([x]) if stats is not None else
                hashlib.blake2b(x.numpy().tobytes(), digest_size=8).hexdigest() for x in xs]
        for x in xs:
            loss = probe.loss(model(x).pow(2).mean())
            opt.zero_grad()
            loss.backward()
            opt.step()
        probe.close()
        self.assertEqual([r["batch_hash"] for r in records(self.dir) if r["kind"] == "step"], want)

    def test_a_batch_given_as_a_conjugate_view_is_hashed_as_its_values(self):
        # z.conj() shares z's memory: the same batch as conj(z) made anew, another batch than z
        torch.manual_seed(0)
        w = torch.nn.Parameter(torch.randn(3, dtype=torch.complex64))
        opt = torch.optim.SGD([w], lr=0.1)
        probe = attach(self.dir, None, opt, plan=plan())
        z = torch.randn(4, 3, dtype=torch.complex64)
        for x in (z.conj(), z.conj().resolve_conj(), z, z.conj().imag, -z.imag):
            probe.batch(x)
            loss = probe.loss(((x.to(torch.complex64) * w).abs() ** 2).mean())
            opt.zero_grad()
            loss.backward()
            opt.step()
        probe.close()
        h = [r["batch_hash"] for r in records(self.dir) if r["kind"] == "step"]
        self.assertEqual(len(h), 5)
        self.assertEqual(h[0], h[1])
        self.assertNotEqual(h[0], h[2])
        self.assertEqual(h[3], h[4])

    def test_a_sparse_or_jagged_tensor_in_the_batch_is_hashed_by_its_values(self):
        # a graph network's forward(x, adj), adj a sparse adjacency matrix (COO or CSR), or a jagged nested
        # batch: hashed as its indices and values, the training not stopped by the forward hook
        class GCN(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = torch.nn.Linear(2, 1)

            def forward(self, x, adj):
                return torch.sparse.mm(adj.to_sparse_coo(), self.lin(x))

        torch.manual_seed(0)
        model = GCN()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        probe = attach(self.dir, model, opt, plan=plan())
        x = torch.randn(4, 2)
        a = torch.eye(4)
        b = a.roll(1, 0)
        jag = torch.nested.nested_tensor([torch.ones(2), torch.ones(3)], layout=torch.jagged)
        for adj in (a.to_sparse(), a.to_sparse(), b.to_sparse(), a.to_sparse_csr(), b.to_sparse_csr(),
                    (a, jag), (a, jag * 2)):
            if isinstance(adj, tuple):
                probe.batch(adj[1])
                adj = adj[0].to_sparse()
            loss = probe.loss(model(x, adj).square().mean())
            opt.zero_grad()
            loss.backward()
            opt.step()
        probe.close()
        h = [r.get("batch_hash") for r in records(self.dir) if r["kind"] == "step"]
        self.assertEqual(len(h), 7)
        self.assertTrue(all(h))
        self.assertEqual(h[0], h[1])
        self.assertEqual(len({h[0], h[2], h[3], h[4], h[5], h[6]}), 6)

    def test_step_records_reach_the_file_while_the_job_runs(self):
        # the recorder's thread fills and writes them within about FLUSH_S; nothing waits for close()
        from flatline_probe import telemetry
        torch.manual_seed(0)
        model = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        probe = attach(self.dir, model, opt, plan=plan())
        for _ in range(5):
            loss = probe.loss(torch.nn.functional.mse_loss(model(torch.ones(4, 2)), torch.zeros(4, 1)))
            opt.zero_grad()
            loss.backward()
            opt.step()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            steps = [r["step"] for r in records(self.dir) if r["kind"] == "step"]
            if len(steps) == 5:
                break
            time.sleep(telemetry.FLUSH_S)
        self.assertEqual(steps, [1, 2, 3, 4, 5])
        self.assertFalse(any(r.get("name") == "run_end" for r in records(self.dir)))
        probe.close()

    def test_the_job_stops_for_the_restart_with_exit_status_3_before_the_next_step(self):
        p = plan(steps=10)
        p.update(checkpoint_every=2, restart_at=5,
                 resume={"from_step": 4, "restore_sampler": True, "finish_scheduler": False})
        plan_file = os.path.join(self.dir, "plan.json")
        with open(plan_file, "w") as f:
            json.dump(p, f)
        script = (
            "import torch\nfrom flatline_probe import attach\n"
            "model = torch.nn.Linear(2, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
            f"probe = attach({self.dir!r}, model, opt)\n"
            "for _ in range(10):\n"
            "    loss = probe.loss(model(torch.ones(4, 2)).square().mean())\n"
            "    opt.zero_grad()\n    loss.backward()\n    opt.step()\n"
            "print('not stopped')\n")
        env = dict(os.environ, FLATLINE_PLAN=plan_file, PYTHONPATH=os.pathsep.join(
            [os.path.join(os.path.dirname(__file__), "..", "..", "..", "python"), os.environ.get("PYTHONPATH", "")]))
        r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 3, r.stdout + r.stderr)
        self.assertNotIn("not stopped", r.stdout)
        rs = records(self.dir)
        self.assertEqual([x["step"] for x in rs if x["kind"] == "step"], [1, 2, 3, 4, 5])
        last = [x for x in rs if x["kind"] != "heartbeat"][-1]
        self.assertEqual((last["name"], last["step"]), ("stop_for_restart", 5))
        self.assertIn("resumes from its checkpoint of step 4", last["detail"])
        # the resumed process (FLATLINE_RESUME=1) goes on past the restart
        r = subprocess.run([sys.executable, "-c", script], env=dict(env, FLATLINE_RESUME="1"), capture_output=True,
                           text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def run_script(self, script, timeout=60):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [os.path.join(os.path.dirname(__file__), "..", "..", "..", "python"), os.environ.get("PYTHONPATH", "")]))
        try:
            return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                                  timeout=timeout)
        except subprocess.TimeoutExpired:
            self.fail("the job hung")

    def test_a_signal_while_the_training_thread_writes_an_event_is_handled_after_it(self):
        # SIGTERM lands while the training's thread holds the writer's lock (writing an event): the handler
        # waits for the write to end instead of waiting forever for the lock its own thread holds
        script = (
            "import os, signal, time, torch\nfrom flatline_probe import attach\n"
            "model = torch.nn.Linear(2, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
            f"probe = attach({self.dir!r}, model, opt)\n"
            "write = probe.writer._write\n"
            "def slow_write(t):\n"
            "    if b'checkpoint_save' in probe.writer._pending[-1]:\n"
            "        os.kill(os.getpid(), signal.SIGTERM)\n"
            "        for _ in range(100): time.sleep(0.001)  # the handler runs here, the lock held\n"
            "    write(t)\n"
            "probe.writer._write = slow_write\n"
            "for _ in range(3):\n"
            "    loss = probe.loss(model(torch.ones(4, 2)).square().mean())\n"
            "    opt.zero_grad()\n    loss.backward()\n    opt.step()\n"
            "probe.checkpoint_saved('ckpt-3')\n"
            "time.sleep(5)\nprint('not stopped')\n")
        r = self.run_script(script)
        self.assertEqual(r.returncode, 128 + 15, r.stdout + r.stderr)
        rs = [x for x in records(self.dir) if x["kind"] != "heartbeat"]
        self.assertEqual([(x["kind"], x.get("name"), x["step"]) for x in rs],
                         [("event", "run_start", 0), ("step", None, 1), ("step", None, 2), ("step", None, 3),
                          ("event", "checkpoint_save", 3), ("event", "interrupted", 3)])

    def test_a_forked_child_writes_nothing(self):
        # a process forked from the job (a DataLoader worker, os.fork()) inherits the probe: its exit, an
        # exception or a signal there writes no record (no step twice, no second run_end or interrupted)
        script = (
            "import os, signal, sys, time, torch\nfrom flatline_probe import attach\n"
            "model = torch.nn.Linear(2, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
            f"probe = attach({self.dir!r}, model, opt)\n"
            "def step():\n"
            "    loss = probe.loss(model(torch.ones(4, 2)).square().mean())\n"
            "    opt.zero_grad()\n    loss.backward()\n    opt.step()\n"
            "for how in ('exit', 'raise', 'sigterm', 'sigint'):\n"
            "    step()  # queued, likely not yet written when the child is forked\n"
            "    pid = os.fork()\n"
            "    if pid == 0:\n"
            "        if how == 'exit': sys.exit(0)\n"
            "        if how == 'raise': raise RuntimeError('in the child')\n"
            "        try:\n"
            "            os.kill(os.getpid(), signal.SIGTERM if how == 'sigterm' else signal.SIGINT)\n"
            "            time.sleep(5)\n"
            "        except KeyboardInterrupt:  # SIGINT as the child had it without the probe\n"
            "            os._exit(7)\n"
            "        os._exit(9)\n"
            "    _, status = os.waitpid(pid, 0)\n"
            "    print(how, os.waitstatus_to_exitcode(status), flush=True)  # (a child would flush it again)\n"
            "step()\nprobe.close()\n")
        r = self.run_script(script)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(r.stdout.split(), ["exit", "0", "raise", "1", "sigterm", "-15", "sigint", "7"])
        rs = [x for x in records(self.dir) if x["kind"] != "heartbeat"]
        self.assertEqual([(x["kind"], x.get("name"), x["step"]) for x in rs],
                         [("event", "run_start", 0)] + [("step", None, i) for i in range(1, 6)] +
                         [("event", "run_end", 5)])

    def resumed_run(self, restore_sampler=True, finish_scheduler=False):
        # 64 samples in batches of 4: 16 a epoch; resumed from a checkpoint of step 5, three steps more
        p = plan(steps=12)
        p.update(checkpoint_every=5, restart_at=6,
                 resume={"from_step": 5, "restore_sampler": restore_sampler, "finish_scheduler": finish_scheduler})
        os.environ["FLATLINE_RESUME"] = "1"
        try:
            torch.manual_seed(0)
            data = TensorDataset(torch.arange(64.0).reshape(64, 1).repeat(1, 2), torch.ones(64, 1))
            model = torch.nn.Linear(2, 1)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            probe = attach(self.dir, model, opt, sampler=BatchSampler(SequentialSampler(data), 4, False), plan=p)
            probe.checkpoint_loaded(5, "ckpt-5")
            firsts = []
            for x, y in DataLoader(data, batch_sampler=probe.sampler):
                firsts.append(int(x[0, 0]))
                loss = probe.loss(torch.nn.functional.mse_loss(model(x) * 1e-3, y))
                opt.zero_grad()
                loss.backward()
                opt.step()
                if len(firsts) == 3:
                    break
            probe.close()
        finally:
            os.environ.pop("FLATLINE_RESUME", None)
        steps = [r for r in records(self.dir) if r["kind"] == "step"]
        return firsts, steps, opt

    def test_a_healthy_resume_goes_on_where_the_checkpoint_left_the_epoch(self):
        firsts, steps, _ = self.resumed_run()
        self.assertEqual(firsts, [20, 24, 28])  # batches 5, 6, 7 of the epoch
        self.assertEqual([r["step"] for r in steps], [6, 7, 8])
        self.assertEqual([r["opt_step"] for r in steps], [6, 7, 8])
        self.assertTrue(all(r["lr"] == 0.1 for r in steps))

    def test_a_resume_that_drops_the_sampler_state_starts_the_epoch_over(self):
        firsts, steps, _ = self.resumed_run(restore_sampler=False)
        self.assertEqual(firsts, [0, 4, 8])  # batches 0, 1, 2 again
        self.assertEqual([r["step"] for r in steps], [6, 7, 8])

    def test_a_finished_schedule_restored_at_the_resume_makes_the_lr_zero(self):
        firsts, steps, opt = self.resumed_run(finish_scheduler=True)
        self.assertEqual(firsts, [20, 24, 28])
        self.assertEqual([r["lr"] for r in steps], [0.0, 0.0, 0.0])
        self.assertEqual([r["update_norm"] for r in steps], [0.0, 0.0, 0.0])
        self.assertEqual(opt.param_groups[0]["lr"], 0.1)  # the job's own lr is given back after each update

    def test_a_plan_for_another_world_is_refused(self):
        p = plan()
        p["world_size"] = 4
        with self.assertRaisesRegex(PlanError, "world_size 4"):
            Probe(self.dir, plan=p)


class TorchPathProbeTest(ProbeTest):
    """Every test above again with the statistics as torch calls (no C compiler, a GPU, other dtypes)
    where the native pass (native.py) takes them when it is built."""

    def setUp(self):
        super().setUp()
        self._native = dict(native._loaded)
        native._loaded["lib"] = None

    def tearDown(self):
        native._loaded.clear()
        native._loaded.update(self._native)


if __name__ == "__main__":
    unittest.main()
