"""The batches a probed job trains (docs/DESIGN.md §16): the tensors of a batch and their bytes (hashed
where no sampler is wrapped), and the batch sampler's wrapper that hashes sample ids, carries out the
plan's replays and resumes mid-epoch."""
import torch

from .plan import PlanError


_Tensor = torch.Tensor
_STRIDED = torch.strided


def tensors_of(obj):
    """Every tensor in a batch (nested dicts, lists, tuples, and objects with tensor attributes), in order."""
    if isinstance(obj, _Tensor):  # (torch.is_tensor's test, without its call)
        return [obj]
    if isinstance(obj, dict):
        return [t for k in obj for t in tensors_of(obj[k])]
    if isinstance(obj, (list, tuple)):
        return [t for x in obj for t in tensors_of(x)]
    if hasattr(obj, "keys") and hasattr(obj, "__getitem__"):  # a BatchEncoding
        return [t for k in obj.keys() for t in tensors_of(obj[k])]
    return []


_SPARSE_COMPRESSED = {torch.sparse_csr: ("crow_indices", "col_indices"), torch.sparse_bsr: ("crow_indices", "col_indices"),
                      torch.sparse_csc: ("ccol_indices", "row_indices"), torch.sparse_bsc: ("ccol_indices", "row_indices")}


def hashed_tensors(tensors):
    """The batch's tensors as the strided ones its hash reads: a sparse one (a graph's adjacency matrix) as
    its indices and values (COO coalesced: equal matrices alike), a jagged nested one as its values and
    offsets; the others as they are."""
    if all(t.layout is _STRIDED for t in tensors):
        return tensors
    out = []
    for t in tensors:
        if t.layout is torch.sparse_coo:
            t = t.detach().coalesce()
            out += [t.indices(), t.values()]
        elif t.layout in _SPARSE_COMPRESSED:
            out += [getattr(t, f)() for f in _SPARSE_COMPRESSED[t.layout]] + [t.values()]
        elif t.layout is torch.jagged:
            out += [t.values(), t.offsets()]
        else:
            out.append(t)
    return out


def bytes_of(t):
    """A tensor's bytes, as a buffer (no copy of a contiguous CPU tensor's; a GPU tensor's are read back); a
    conjugate or negative view's are its values' (z.conj() shares z's memory)."""
    a = t.detach() if t.requires_grad else t
    if a.device.type != "cpu":
        a = a.cpu()
    if not a.is_contiguous() or a.is_conj() or a.is_neg():
        a = a.resolve_conj().resolve_neg().contiguous()
    try:
        return a.numpy()
    except TypeError:  # no numpy dtype (bfloat16, ...): its bytes
        return a.reshape(-1).view(torch.uint8).numpy()


class ReplaySampler:
    """A batch sampler's wrapper (docs/DESIGN.md §16): each batch it yields is a step's (grad_accum 1);
    where the plan makes step s train global batch j, it yields batch j's indices again and the wrapped
    sampler does not move on, as the harness's sampler does. Hashes the sample ids of each batch. After a
    resume (checkpoint_loaded) its first epoch skips the batches of it already trained (the step resumed
    from, modulo its batches per epoch: the loop sets the epoch), unless the plan's fault drops the
    sampler's position: then the epoch starts over."""

    def __init__(self, probe, batch_sampler):
        self.probe, self.inner = probe, batch_sampler
        self.produced = 0  # batches yielded since the start of training
        self.kept = {}     # global batch -> its indices, for the ones the plan replays

    def __len__(self):
        return len(self.inner)

    def __iter__(self):
        it = iter(self.inner)
        for _ in range(self.probe._resume_skip_for(len(self.inner))):  # a resume mid-epoch: what was trained
            if next(it, None) is None:
                return
        while True:
            step = self.probe._step_base + self.produced + 1
            j = self.probe._acts(step).get("batch_index")
            if j is not None:
                if j not in self.kept:
                    raise PlanError(f"step {step}: the plan replays batch {j}, which this process never trained")
                ids = self.kept[j]
            else:
                try:
                    ids = list(next(it))
                except StopIteration:
                    return
                if step - 1 in self.probe._replayed:
                    self.kept[step - 1] = ids
            self.produced += 1
            self.probe._ids_by_step[step] = ids
            yield ids
