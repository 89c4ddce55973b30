"""What the three example trainers share: the fortunes corpus as byte windows, the run's shape from the
probe's plan (or defaults without one), and a tiny byte-level causal LM (docs/DESIGN.md §16)."""
import glob
import os

import torch

FORTUNES = "/usr/share/games/fortunes"  # Debian's fortunes-min / fortunes packages


def shape(plan):
    """steps, seed, collective timeout (s), fp16, device (torch.device): the plan's when flatline runs the
    job (`--device cuda` makes it cuda), else defaults."""
    if plan:
        return (plan["steps"], plan["seed"], plan["collective_timeout_s"], plan["precision"] == "fp16",
                device_of(plan["device"]))
    return int(os.environ.get("STEPS", 60)), 7, 30.0, False, torch.device("cpu")


def device_of(kind):
    """cpu, or cuda:LOCAL_RANK modulo the GPUs this process sees (ranks share GPUs over Gloo, as flatline's
    own trainer's do; sim/trainer.cpp)."""
    if kind != "cuda":
        return torch.device("cpu")
    n = torch.cuda.device_count()
    if n == 0:
        raise SystemExit("the plan's device is cuda, but this process sees no GPU")
    return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)) % n)


class ByteWindows(torch.utils.data.Dataset):
    """Consecutive windows of `block + 1` bytes of the fortunes files: input ids and next-byte labels."""

    def __init__(self, block=32, as_dict=False):
        files = sorted(f for f in glob.glob(os.path.join(FORTUNES, "*")) if os.path.isfile(f) and "." not in
                       os.path.basename(f))
        if not files:
            raise SystemExit(f"{FORTUNES}: no fortune files (apt-get install fortunes-min)")
        data = b"".join(open(f, "rb").read() for f in files)
        self.data = torch.tensor(list(data[: 200_000]), dtype=torch.long)
        self.block, self.as_dict = block, as_dict

    def __len__(self):
        return (len(self.data) - 1) // self.block

    def __getitem__(self, i):
        x = self.data[i * self.block: (i + 1) * self.block + 1]
        if self.as_dict:
            return {"input_ids": x[:-1], "labels": x[:-1].clone()}  # transformers shifts the labels itself
        return x[:-1], x[1:]


class TinyLM(torch.nn.Module):
    """Embedding, one causal self-attention block, a head: a byte-level LM small enough for CI on CPU."""

    def __init__(self, d=64, block=32):
        super().__init__()
        self.tok = torch.nn.Embedding(256, d)
        self.pos = torch.nn.Parameter(torch.zeros(block, d))
        self.block = torch.nn.TransformerEncoderLayer(d, 4, 4 * d, dropout=0.0, batch_first=True, norm_first=True)
        self.head = torch.nn.Linear(d, 256)

    def forward(self, x, y=None):
        t = x.shape[1]
        mask = torch.nn.Transformer.generate_square_subsequent_mask(t)
        h = self.block(self.tok(x) + self.pos[:t], src_mask=mask, is_causal=True)
        logits = self.head(h)
        if y is None:
            return logits
        return torch.nn.functional.cross_entropy(logits.reshape(-1, 256), y.reshape(-1))


def warmup_cosine(optimizer, warmup, total):
    """Linear warmup from 0, then cosine to 0 at `total` (transformers' get_cosine_schedule_with_warmup)."""
    import math

    def f(k):
        if k < warmup:
            return k / max(1, warmup)
        return 0.5 * (1 + math.cos(math.pi * min(1.0, (k - warmup) / max(1, total - warmup))))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, f)
