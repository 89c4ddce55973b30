"""The step's statistics over a model's many tensors in a few vectorised passes (docs/DESIGN.md §16).

A model has tens to hundreds of parameter tensors; a statistic taken tensor by tensor costs a dispatch
each, and `torch.cat` into a new tensor an allocation and a copy. Here a list of tensors is copied into
one buffer per device that is kept from step to step (`FlatCopy`, `torch._foreach_copy_` into views of
it), and each statistic is one or three passes over a flat buffer:

  sq_norm(flat)          the squared L2 norm: a BLAS dot (float32 sums: squares overflow past a norm
                         of ~1.8e19 and read as inf); `linalg.vector_norm` squared for other dtypes
  nonzeros_(flat)        how many elements are not exactly 0 (-0.0 is 0): the signs, in place, dotted
                         with themselves; two vectorised passes, where count_nonzero's loop is scalar
                         (~4x slower on a CPU). A NaN's sign is 0: where the squared norm is NaN
                         the count is not taken (the record then has no grad_zero_frac).
  nonzeros(t, out)       the same count with the signs written into a kept buffer, t left as it is
                         (DDP's all-reduced bucket, which the optimizer still reads)

Each returns a 0-d tensor on the flat's device: nothing is read back here, so nothing synchronises a
GPU. The costs behind these choices are in bench/README.md ("The probe's overhead").

A batch on a GPU is hashed there (`device_hash_words`): reading its bytes back would synchronise the
device every step. Each tensor's elements, as integers (a floating tensor's bits; an 8-byte element as
its two 32-bit halves), widened to 64 bits, are multiplied by fixed pseudo-random 64-bit weights and
summed, wrapping (exact, so the same in any order), on the tensor's own device; the words travel to the
host with the step's statistics, a step later, and `hash_of_words` makes them the record's 16 hex
digits. Equal batches give equal hashes; the detectors compare hashes only within a run, whose batches
all take the same path (a run's batches stay on the devices they started on).
"""
import hashlib
import math

import torch

_foreach_copy_ = getattr(torch, "_foreach_copy_", None)


def parts(t):
    """A complex tensor as its real and imaginary parts (torch.view_as_real: a last dimension of 2; a
    conjugate view resolved first, which view_as_real refuses); any other tensor as it is."""
    return torch.view_as_real(t.resolve_conj()) if t.is_complex() else t


def sq_norm(flat):
    """The squared L2 norm of a 1-D tensor, as a 0-d tensor on its device (a complex one's: the sum of
    |z|^2, over its real and imaginary parts)."""
    if flat.is_complex():
        flat = parts(flat).reshape(-1)
    if flat.dtype in (torch.float32, torch.float64) and flat.is_contiguous():
        return torch.dot(flat, flat)
    return torch.linalg.vector_norm(flat, dtype=torch.float32).square()


def nonzeros_(flat):
    """How many elements of a 1-D floating tensor are not 0, as a 0-d tensor; the tensor is overwritten
    with the signs of its elements (-1, 0, 1), whose squares sum to the count. A NaN counts as 0."""
    return sq_norm(flat.sign_())


def scratch_dtype(t):
    """The dtype of the buffer nonzeros() counts a tensor's signs in: its own where it is float32 or
    float64, else float32 (a narrower float's sum of squares would not count exactly)."""
    return t.dtype if t.dtype in (torch.float32, torch.float64) else torch.float32


def nonzeros(t, out):
    """nonzeros_ without overwriting t: its signs go into `out` (t's shape, of scratch_dtype(t)); in one
    pass where the dtypes agree (torch.sign's out=), else copied there first."""
    if out.dtype == t.dtype:
        return sq_norm(torch.sign(t, out=out))
    return nonzeros_(out.copy_(t))


_HASH_SEED = 0x5EED_F1A7
_hash_weights = {}  # (numel, device) -> int64 weights; a few sizes (the last batch of an epoch is smaller)


def _weights(n, device):
    w = _hash_weights.get((n, device))
    if w is None:
        if len(_hash_weights) >= 16:
            _hash_weights.clear()
        g = torch.Generator().manual_seed(_HASH_SEED)
        w = torch.randint(-(1 << 63), (1 << 63) - 1, (n,), dtype=torch.int64, generator=g).to(device)
        _hash_weights[(n, device)] = w
    return w


def _hash_ints(t):
    """A tensor's values as a 1-D tensor of integers the weighted sum takes (device_hash_words): a complex
    tensor as its parts (a conjugate or negative view resolved first: its values), a floating one as its
    bits (an integer of its width); elements of 8 bytes (int64, float64, complex64's and complex128's
    parts as 32-bit halves where they are 64) as two signed 32-bit halves each: in a wrapping sum of
    element x weight, bit k of an element moves only bits k and up, so a 64-bit element's top bit (a
    float64's sign) would count only through its weight's lowest bit, a half of the time."""
    a = t.detach().resolve_conj().resolve_neg()
    if a.is_complex():
        a = torch.view_as_real(a)
    a = a.reshape(-1)
    if a.element_size() == 8:  # (a 1-D view whose elements are not adjacent, data[:, 0], copied first)
        return a.contiguous().view(torch.int32)
    if a.is_floating_point():
        return a.view({4: torch.int32, 2: torch.int16, 1: torch.uint8}[a.element_size()])
    return a


def device_hash_words(tensors):
    """A batch's hash on its device, without reading it back: a 1-D float64 tensor of 32-bit halves (exact
    in a double), two per tensor (its weighted sum, _hash_ints), then one per tensor of its element count.
    A batch on several devices (a CPU tensor of lengths beside a GPU batch, a model split over GPUs): each
    tensor summed where it is, the words on the first tensor's device that is not the CPU."""
    dev = next((t.device for t in tensors if t.device.type != "cpu"), None)
    words = []
    for t in tensors:
        a = _hash_ints(t)
        s = (a.to(torch.int64) * _weights(a.numel(), a.device)).sum()
        words.append(s if dev is None else s.to(dev, non_blocking=True))
    w = torch.stack(words)
    halves = torch.cat([w & 0xFFFFFFFF, (w >> 32) & 0xFFFFFFFF])
    sizes = torch.tensor([t.numel() for t in tensors], dtype=torch.float64)
    return torch.cat([halves.to(torch.float64), sizes.to(w.device, non_blocking=True)])


def hash_of_words(words):
    """The record's batch_hash (16 hex digits) from device_hash_words' values, read back."""
    return hashlib.blake2b(",".join(str(w) for w in words).encode(), digest_size=8).hexdigest()


class FlatCopy:
    """A copy of a list of tensors in one buffer per device, float32 (float64 where a tensor is float64 or
    complex128), made again only when the caller's key for the list (e.g. the ids of the parameters) or
    the tensors' shapes, dtypes or devices change (`p.data = ...` and `model.double()` keep a parameter's
    id). A complex tensor is copied as its real and imaginary parts (torch.view_as_real: two elements an
    element, as DDP's buckets hold complex gradients), so the buffer's sum of squares is the sum of |z|^2
    and a difference of two copies is the complex difference's parts.

    copy(tensors, key)  -> the buffers, now holding the tensors' values
    release()           frees the buffers (made again by the next copy)
    """

    def __init__(self):
        self.key = None
        self.flats = []   # one 1-D buffer per device, in the order the devices first appear
        self._groups = []  # per buffer: (views of it in the tensors' shapes, the tensors' indices or None)
        self._complex = False  # a tensor is complex: copied as its parts

    def _make(self, tensors):
        by_dev = {}
        for i, t in enumerate(tensors):
            by_dev.setdefault(t.device, []).append(i)
        self.flats, self._groups = [], []
        self._complex = any(t.is_complex() for t in tensors)
        for dev, idx in by_dev.items():
            wide = any(tensors[i].dtype in (torch.float64, torch.complex128) for i in idx)
            shapes = [tuple(tensors[i].shape) + ((2,) if tensors[i].is_complex() else ()) for i in idx]
            flat = torch.empty(sum(math.prod(s) for s in shapes), dtype=torch.float64 if wide else torch.float32,
                               device=dev)
            views, at = [], 0
            for shape in shapes:
                n = math.prod(shape)
                views.append(flat[at:at + n].view(shape))
                at += n
            self.flats.append(flat)
            self._groups.append((views, None if len(by_dev) == 1 else idx))

    @staticmethod
    def key_of(tensors, key):
        """What the copy is kept under: the caller's key and the tensors' shapes, dtypes and devices."""
        return key, tuple((t.shape, t.dtype, t.device) for t in tensors)

    def copy(self, tensors, key):
        key = self.key_of(tensors, key)
        if key != self.key:
            self._make(tensors)
            self.key = key
        with torch.no_grad():
            for views, idx in self._groups:
                src = tensors if idx is None else [tensors[i] for i in idx]
                if self._complex:
                    src = [parts(t) for t in src]
                if _foreach_copy_ is not None:
                    _foreach_copy_(views, src)
                else:
                    for v, t in zip(views, src):
                        v.copy_(t)
        return self.flats

    def nbytes(self):
        return sum(f.numel() * f.element_size() for f in self.flats)

    def release(self):
        self.key, self.flats, self._groups = None, [], []


SNAPSHOT_KEEP_BYTES = 256 << 20  # parameters up to this size keep their copy from one update to the next


class UpdateNorms:
    """The parameters' squared norm after an update and the update's own (what it changed), from a
    snapshot of the parameters taken before it:

    before(params, key)  ahead of the update (key identifies the list, e.g. the parameters' ids)
    after(params, key)   -> [("param_sq", v), ("update_sq", v)] behind it; update_sq only where
                            before() was called for this update with the same key
    forget()             the step ended: no snapshot counts as this update's any more

    The snapshot an update leaves behind (the parameters after it) stands as the next update's "before"
    while no parameter changed in between (their autograd version counters say so), so a step in a run
    of measured steps copies the parameters once. With the native statistics (native.py) and contiguous
    float32 CPU parameters, that is one buffer and one pass per update (the sums and the snapshot's
    refresh together); else two flat copies (FlatCopy) and torch calls, the difference written into the
    before's buffer. Parameters past SNAPSHOT_KEEP_BYTES are not kept between updates (copied afresh).
    Values are Python floats on the native path, 0-d tensors on the device on the other."""

    def __init__(self, native=None):
        self.native = native
        self._flat, self._flat_key = None, None  # native: the one snapshot buffer, and its list's key
        self._before, self._after = FlatCopy(), FlatCopy()  # torch: before this update, after the last
        self._versions = None  # (path, version counters) when the last update's snapshot was taken
        self._has = None       # which path took this update's snapshot: None, "native" or "torch"

    def forget(self):
        self._has = None

    def _native_ok(self, params):
        return self.native is not None and self.native.plain(params)

    def before(self, params, key):
        versions, self._versions = self._versions, None
        if versions is not None and versions[0] == "native" and self._flat_key == key and \
                [p._version for p in params] == versions[1]:
            self._has = "native"  # the last update's snapshot (its pass checks the tensors again)
            return
        native = self._native_ok(params)
        unchanged = versions is not None and versions[0] == ("native" if native else "torch") \
            and [p._version for p in params] == versions[1]
        if native:
            if not (unchanged and self._flat_key == key):
                self._snapshot_native(params, key)
            self._has = "native"
            return
        if unchanged and self._after.key == FlatCopy.key_of(params, key):
            self._before, self._after = self._after, self._before
        else:
            self._before.copy(params, key)
        self._has = "torch"

    def _snapshot_native(self, params, key):
        """The parameters into the native snapshot, made again where the list or its sizes changed (a
        `p.data = ...` of another shape keeps the parameter's id)."""
        if self._flat_key != key or not self.native.gather_of(params, self._flat):
            self._flat = torch.empty(sum(p.numel() for p in params), dtype=torch.float32)
            self._flat_key = key
            self.native.gather_of(params, self._flat)

    def after(self, params, key):
        got = None  # the native pass over this update's snapshot (it checks the tensors itself)
        stale = None  # that snapshot, where the tensors are no longer the native pass's (below)
        versions = None  # the parameters' version counters, as the native pass read them
        if self._has == "native" and self._flat_key == key:
            versions = []
            got = self.native.update_stats_of(params, self._flat, versions)  # None: the sizes changed since
            if got is None and self._flat.numel() == sum(p.numel() for p in params):
                stale = self._flat  # `p.data = p.data.double()` moved no version: before() kept it
        native = got is not None or self._native_ok(params)
        if native:
            if got is not None:
                out = [("param_sq", got[0]), ("update_sq", got[1])]
            else:  # no snapshot before this update: the norm, and one for the next update
                out = [("param_sq", self.native.grad_stats_of(params)[0])]
                self._snapshot_native(params, key)
            kept = self._flat.numel() * 4 <= SNAPSHOT_KEEP_BYTES
            if not kept:
                self._flat, self._flat_key = None, None
        else:
            after = self._after.copy(params, key)
            out = [("param_sq", sq_norm(flat)) for flat in after]
            if self._has == "torch" and self._before.key == self._after.key:
                for a, b in zip(after, self._before.flats):  # the difference into the before's buffer
                    out.append(("update_sq", sq_norm(torch.sub(a, b, out=b))))
            elif stale is not None:  # the update from the native snapshot, a parameter at a time (rare)
                at = 0
                with torch.no_grad():
                    for p in params:
                        was = stale[at:at + p.numel()].to(p.device, p.dtype)
                        out.append(("update_sq", sq_norm(torch.sub(p.reshape(-1), was).reshape(-1))))
                        at += p.numel()
            kept = self._after.nbytes() <= SNAPSHOT_KEEP_BYTES
            if not kept:  # a large model's copies are not kept from one update to the next
                self._before.release()
                self._after.release()
        self._has = None
        if got is None:  # (the native pass read them)
            versions = [p._version for p in params]
        self._versions = ("native" if native else "torch", versions) if kept else None
        return out
