#!/usr/bin/env python3
"""PyTorch reference for flatline's GPT step (bench/compare_reference.sh runs both side by side).

The same model as sim/models.cpp (GPT-2 layout: token + position embeddings, pre-LayerNorm blocks of
causal self-attention and a 4x tanh-GELU MLP, final LayerNorm, lm head tied to the token embedding),
the same optimizer (AdamW, betas 0.9/0.95, weight decay 0.1, global-norm clip 1.0), on the same bytes
(the Debian fortunes corpus), one rank, the same intra-op threads. Prints the median ms per step.
Runs on the project's torch (requirements.txt: the wheel whose LibTorch flatline links): run it with
.venv/bin/python.

--formulation nanogpt (default): written as a PyTorch user writes it (nanoGPT's masked_fill attention,
F.gelu(approximate="tanh"), torch.optim.AdamW defaults). --formulation flatline: the formulations
flatline's harness uses, in Python: the causal mask as an additive bias fused into baddbmm, the tanh
GELU as x * sigmoid(2k(x + 0.044715 x^3)) with its derivative written out (sim/gelu.cpp), AdamW with
foreach=True. The second isolates what C++ and the fused optimizer are worth from the formulations.
--compile: the nanogpt formulation under torch.compile (TorchInductor's C++ codegen on CPU, the
default mode); the steps spent compiling (the first two) are not timed. --device cuda runs it on the
GPU (--amp fp16: autocast + GradScaler; bf16: autocast), synchronising at the end of each step.
"""
import argparse, glob, math, os, statistics, time

import torch
import torch.nn as nn
import torch.nn.functional as F


TWO_K, CUBIC = 2 * math.sqrt(2 / math.pi), 0.044715


class GeluTanh(torch.autograd.Function):
    """gelu(x, approximate="tanh") as x * sigmoid(u), u = 2k (x + c x^3), as sim/gelu.cpp computes it."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * torch.sigmoid(torch.addcmul(x, x.square(), x, value=CUBIC) * TWO_K)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        x2 = x.square()
        s = torch.sigmoid(torch.addcmul(x, x2, x, value=CUBIC) * TWO_K)
        return x2.mul_(3 * CUBIC * TWO_K).add_(TWO_K).mul_(x).mul_(s).mul_(1 - s).add_(s).mul_(g)


class Block(nn.Module):
    def __init__(self, n_embd, n_head, n_layer, block_size, fused=False):
        super().__init__()
        self.n_head = n_head
        self.fused = fused
        self.ln_1 = nn.LayerNorm(n_embd)
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.attn_c_proj = nn.Linear(n_embd, n_embd)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.mlp_c_proj = nn.Linear(4 * n_embd, n_embd)
        self.register_buffer("mask", torch.tril(torch.ones(block_size, block_size, dtype=torch.bool)))
        self.register_buffer("bias", torch.zeros(block_size, block_size).masked_fill(~self.mask, float("-inf")))
        for l in (self.c_attn, self.c_fc):
            nn.init.normal_(l.weight, 0.0, 0.02), nn.init.zeros_(l.bias)
        for l in (self.attn_c_proj, self.mlp_c_proj):
            nn.init.normal_(l.weight, 0.0, 0.02 / math.sqrt(2 * n_layer)), nn.init.zeros_(l.bias)

    def attention(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, 2)
        heads = lambda t: t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q, k, v = heads(q), heads(k), heads(v)
        if self.fused:
            hd = C // self.n_head
            q, k, v = (t.reshape(B * self.n_head, T, hd) for t in (q, k, v))
            att = torch.baddbmm(self.bias[:T, :T], q, k.transpose(1, 2), alpha=1.0 / math.sqrt(hd)).softmax(-1)
            y = torch.bmm(att, v).view(B, self.n_head, T, hd).transpose(1, 2).contiguous().view(B, T, C)
            return self.attn_c_proj(y)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // self.n_head))
        att = att.masked_fill(~self.mask[:T, :T], float("-inf")).softmax(-1)
        return self.attn_c_proj((att @ v).transpose(1, 2).contiguous().view(B, T, C))

    def forward(self, x):
        x = x + self.attention(self.ln_1(x))
        h = self.c_fc(self.ln_2(x))
        return x + self.mlp_c_proj(GeluTanh.apply(h) if self.fused else F.gelu(h, approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, n_layer, n_head, n_embd, block_size, fused=False):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(256, n_embd), nn.Embedding(block_size, n_embd)
        nn.init.normal_(self.wte.weight, 0.0, 0.02), nn.init.normal_(self.wpe.weight, 0.0, 0.02)
        self.h = nn.ModuleList(Block(n_embd, n_head, n_layer, block_size, fused) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.size(1), device=idx.device))
        for b in self.h:
            x = b(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.view(-1, 256), targets.reshape(-1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--n_layer", type=int, default=4)
    p.add_argument("--n_head", type=int, default=4)
    p.add_argument("--n_embd", type=int, default=128)
    p.add_argument("--block_size", type=int, default=128)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--formulation", choices=["nanogpt", "flatline"], default="nanogpt")
    p.add_argument("--compile", action="store_true")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--amp", choices=["fp32", "fp16", "bf16"], default="fp32")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    files = sorted(f for f in glob.glob("/usr/share/games/fortunes/*")
                   if os.path.isfile(f) and not os.path.islink(f) and "." not in os.path.basename(f))
    data = torch.tensor(list(b"".join(open(f, "rb").read() for f in files)), dtype=torch.long)
    fused = a.formulation == "flatline"
    dev = torch.device(a.device)
    model = GPT(a.n_layer, a.n_head, a.n_embd, a.block_size, fused).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1,
                            **({"fused": True} if a.device == "cuda" else {"foreach": fused}))
    step_model = torch.compile(model) if a.compile else model
    amp_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(a.amp)
    scaler = torch.amp.GradScaler(a.device, enabled=a.amp == "fp16")
    n = (len(data) - 1) // a.block_size
    g = torch.Generator().manual_seed(1)
    warmup = 2 if a.compile else 1
    times = []
    for i in range(a.steps + warmup):
        t0 = time.perf_counter()
        ids = torch.randint(0, n, (a.batch,), generator=g) * a.block_size
        x = torch.stack([data[j:j + a.block_size] for j in ids]).to(dev, non_blocking=True)
        y = torch.stack([data[j + 1:j + 1 + a.block_size] for j in ids]).to(dev, non_blocking=True)
        opt.zero_grad(set_to_none=True)
        with torch.autocast(a.device, dtype=amp_dtype or torch.float32, enabled=amp_dtype is not None):
            loss = step_model(x, y)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        if a.device == "cuda":
            torch.cuda.synchronize()
        if i >= warmup:
            times.append((time.perf_counter() - t0) * 1000)
    kind = "compile" if a.compile else "eager"
    print(f"pytorch-{kind} ({a.formulation}) n_layer={a.n_layer} n_embd={a.n_embd} block={a.block_size} batch={a.batch} "
          f"threads={a.threads} device={a.device} amp={a.amp}: {statistics.median(times):.2f} ms/step (median of {a.steps})")


if __name__ == "__main__":
    main()
