"""The step's statistics in one native pass each, for CPU float32 tensors (docs/DESIGN.md §16).

stats.c, beside this file, is compiled once per machine and source with the system's C compiler ($CC,
else `cc`) into the user's cache ($XDG_CACHE_HOME, else ~/.cache, /flatline-probe/), and loaded through
ctypes: the probe stays standard library + torch to install, and a step's statistics cost two calls
instead of ten torch calls and two copies. Where there is no compiler, the compile fails, the cache is
not writable, or FLATLINE_PROBE_NATIVE=0, `load()` returns None (saying why once on stderr where asked)
and the probe takes the same statistics with torch calls (norms.py). Tensors on a GPU, in other dtypes,
not contiguous, or without memory of their own (a data pointer of 0: a jagged nested tensor, a
MaskedTensor) take the torch path too (the `*_of` methods return None for them).

Several ranks starting at once compile into their own temporary file and rename it into place, so a
reader never loads a half-written library.
"""
import ctypes
import hashlib
import os
import platform
import shlex
import shutil
import struct
import subprocess
import sys
import tempfile

import torch

NATIVE_ENV = "FLATLINE_PROBE_NATIVE"   # "0": never compile or load the native statistics
CC_ENV = "CC"                          # the C compiler, with any arguments (default: cc)
CACHE_ENV = "XDG_CACHE_HOME"           # the cache's parent (default: ~/.cache)
COMPILE_TIMEOUT_S = 120
CFLAGS = ["-O3", "-shared", "-fPIC", "-x", "c"]  # C even to a C++ driver

_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "stats.c")
_F32, _STRIDED = torch.float32, torch.strided
_loaded = {}  # "lib" -> Stats or None, once per process
_why = None   # why load() returned None


def _library_path(cc):
    with open(_SOURCE, "rb") as f:
        src = f.read()
    key = hashlib.sha256(src + repr((cc, CFLAGS, platform.machine())).encode()).hexdigest()[:16]
    cache = os.environ.get(CACHE_ENV) or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "flatline-probe", f"stats-{key}.so")


def _build(cc, path):
    """Compiles stats.c into a new file beside `path`, loads it from there (a name this process never
    loaded: the dynamic loader hands back an earlier library of the same name, whatever the file holds
    now), then renames it to `path`."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".stats-", suffix=".so", dir=os.path.dirname(path))
    os.close(fd)
    try:
        r = subprocess.run([*shlex.split(cc), "-o", tmp, *CFLAGS, _SOURCE], capture_output=True, text=True,
                           timeout=COMPILE_TIMEOUT_S)
        if r.returncode != 0:
            raise OSError(f"{cc} exited with status {r.returncode}: {r.stderr.strip()[-400:]}")
        if os.path.getsize(tmp) == 0:
            raise OSError(f"{cc} exited with status 0 but wrote no library")
        stats = Stats(ctypes.CDLL(tmp))
        os.replace(tmp, path)
        return stats
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def load(say=False):
    """The native statistics (a Stats), or None; `say`: print why not, once, on stderr."""
    global _why
    if "lib" not in _loaded:
        _loaded["lib"] = None
        if os.environ.get(NATIVE_ENV, "1") == "0":
            _why = f"{NATIVE_ENV}=0"
        else:
            cc = os.environ.get(CC_ENV) or "cc"
            try:
                argv = shlex.split(cc)
            except ValueError:  # unbalanced quotes
                argv = []
            if not argv or shutil.which(argv[0]) is None:
                _why = f"no C compiler ({cc}) on PATH"
            else:
                try:
                    path = _library_path(cc)
                    try:
                        stats = Stats(ctypes.CDLL(path)) if os.path.exists(path) else None
                    except (OSError, AttributeError):  # damaged (a full disk, a copy cut short), or not
                        stats = None                   # this source's library: built again
                    _loaded["lib"] = stats if stats is not None else _build(cc, path)
                except (OSError, AttributeError, ValueError, subprocess.SubprocessError) as e:
                    _why = f"cannot build {_SOURCE}: {e}"
    if _loaded["lib"] is None and say and _why:
        print(f"flatline probe: the step's statistics run as torch calls ({_why}); "
              f"bench/README.md \"The probe's overhead\" says what that costs", file=sys.stderr, flush=True)
        _why = None
    return _loaded["lib"]


def _plain_args(ts, versions=None):
    """(pointers, element counts) of the tensors, packed as int64 arrays (bytes: ctypes passes their buffer),
    and the total count; None where one is not a contiguous float32 CPU tensor. `versions`: a list the
    tensors' autograd version counters are appended to, read in the same loop. One loop of attribute reads
    a tensor: this is the Python a pass costs (docs/DESIGN.md §16)."""
    ptrs, counts = [], []
    try:
        for t in ts:
            # (the layout first: a jagged nested tensor is float32, "contiguous", and its data_ptr() is 0
            # without raising; data_ptr() raises for tensors without storage)
            if t.dtype is not _F32 or not t.is_cpu or t.layout is not _STRIDED or not t.is_contiguous():
                return None
            ptr, n = t.data_ptr(), t.numel()
            if not ptr and n:  # a tensor subclass without memory of its own (MaskedTensor): no pointer
                return None
            ptrs.append(ptr)
            counts.append(n)
            if versions is not None:
                versions.append(t._version)
    except RuntimeError:
        return None
    k = len(ptrs)
    return k, struct.pack(f"{k}q", *ptrs), struct.pack(f"{k}q", *counts), sum(counts)


def plain(ts):
    """Whether every tensor is one the native passes take (_plain_args' check: a contiguous float32 CPU
    tensor with memory of its own)."""
    return _plain_args(ts) is not None


class Stats:
    """The loaded library's passes (stats.c), over lists of tensors. Safe from any thread (DDP's
    communication hook may run on the process group's): each call has its own argument arrays."""

    plain = staticmethod(plain)

    def __init__(self, lib):
        p, i64, dp = ctypes.c_void_p, ctypes.c_int64, ctypes.POINTER(ctypes.c_double)
        lib.flatline_grad_stats.argtypes = [i64, p, p, ctypes.POINTER(i64)]
        lib.flatline_grad_stats.restype = ctypes.c_double
        lib.flatline_gather.argtypes = [i64, p, p, p]
        lib.flatline_gather.restype = None
        lib.flatline_update_stats.argtypes = [i64, p, p, p, dp]
        lib.flatline_update_stats.restype = ctypes.c_double
        lib.flatline_xxh64.argtypes = [i64, p, p]
        lib.flatline_xxh64.restype = ctypes.c_uint64
        self.lib = lib
        # update_stats_of's tensors as last checked in full: ([data pointers], [byte sizes], their _plain_args),
        # one tuple (read and replaced whole: probes on two threads never mix two lists' halves)
        self._seen = None

    def xxh64_of(self, ts):
        """xxh64(ts) as 16 hex digits (xxhsum's form), or None."""
        h = self.xxh64(ts)
        return None if h is None else f"{h:016x}"

    def xxh64(self, ts):
        """XXH64 of the tensors' bytes one after the other (as if joined), an int; a tensor that is not
        contiguous, or a conjugate or negative view (z.conj(), its .imag: another tensor's memory and a
        bit that says what its values are), is hashed as its values' contiguous copy. None where one is not
        a dense CPU tensor (a GPU batch is hashed on its device: norms.device_hash_words)."""
        ptrs, sizes, copies = [], [], []
        for t in ts:
            if not t.is_cpu or t.layout is not _STRIDED:
                return None
            if not t.is_contiguous() or t.is_conj() or t.is_neg():
                t = t.resolve_conj().resolve_neg().contiguous()
                copies.append(t)  # alive across the call
            ptr, n = t.data_ptr(), t.nbytes
            if not ptr and n:  # a tensor subclass without memory of its own (MaskedTensor): no pointer
                return None
            ptrs.append(ptr)
            sizes.append(n)
        k = len(ptrs)
        return self.lib.flatline_xxh64(k, struct.pack(f"{k}q", *ptrs), struct.pack(f"{k}q", *sizes))

    def grad_stats_of(self, ts):
        """(sum of squares, nonzero count, element count) of the tensors, or None off the native path."""
        a = _plain_args(ts)
        if a is None:
            return None
        k, ptrs, counts, total = a
        nz = ctypes.c_int64()
        s = self.lib.flatline_grad_stats(k, ptrs, counts, ctypes.byref(nz))
        return s, nz.value, total

    def gather_of(self, ts, flat):
        """The tensors' elements copied into `flat` (a contiguous float32 CPU tensor of their total size),
        in order; False (nothing done) off the native path."""
        a = _plain_args(ts)
        if a is None or not plain((flat,)) or a[3] != flat.numel():
            return False
        self.lib.flatline_gather(a[0], a[1], a[2], flat.data_ptr())
        return True

    def update_stats_of(self, ts, before, versions=None):
        """(sum of squares of the tensors, of the tensors minus `before`), `before` (a contiguous float32
        CPU tensor of their total size) then set to the tensors; None off the native path. `versions`: a
        list the tensors' version counters are appended to. The tensors (an optimizer's parameters, the
        same from step to step) are checked in full only where one's data pointer or byte size is not what
        it was at the last full check (a `p.data = ...`, `model.double()`, `.to()`): the pass reads that
        many bytes from that pointer, within the memory the tensor had then."""
        ptrs, sizes = [], []
        try:
            for t in ts:
                ptrs.append(t.data_ptr())
                sizes.append(t.nbytes)
        except RuntimeError:  # a tensor without storage (sparse, mkldnn)
            return None
        seen = self._seen
        if seen is not None and seen[0] == ptrs and seen[1] == sizes:
            a = seen[2]
            if versions is not None:
                versions += [t._version for t in ts]
        else:
            a = _plain_args(ts, versions)
            self._seen = (ptrs, sizes, a) if a is not None else None
        if a is None or not plain((before,)) or a[3] != before.numel():
            return None
        us = ctypes.c_double()
        ps = self.lib.flatline_update_stats(a[0], a[1], a[2], before.data_ptr(), ctypes.byref(us))
        return ps, us.value
