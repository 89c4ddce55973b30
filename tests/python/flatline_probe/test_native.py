"""The probe's native statistics (python/flatline_probe/native.py, stats.c; docs/DESIGN.md §16): exact
values in the vectorised loops and their tails, what falls back to torch calls, how the library is
built and refused, and the update's norms alike on both paths (norms.UpdateNorms)."""
import math
import os
import tempfile
import unittest
from unittest import mock

import torch

from flatline_probe import native
from flatline_probe.norms import UpdateNorms

STATS = native.load()

_M = (1 << 64) - 1
_P1, _P2, _P3, _P4, _P5 = (0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0x85EBCA77C2B2AE63,
                           0x27D4EB2F165667C5)


def _rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & _M


def _round(acc, lane):
    return _rotl((acc + lane * _P2) & _M, 31) * _P1 & _M


def xxh64(data):
    """XXH64 with seed 0, written from xxHash's doc/xxhash_spec.md, independently of stats.c's."""
    n, i = len(data), 0
    word = lambda j, w=8: int.from_bytes(data[j:j + w], "little")  # noqa: E731
    if n >= 32:
        v = [(_P1 + _P2) & _M, _P2, 0, (-_P1) & _M]
        while i + 32 <= n:
            v = [_round(v[j], word(i + 8 * j)) for j in range(4)]
            i += 32
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _M
        for x in v:
            h = ((h ^ _round(0, x)) * _P1 + _P4) & _M
    else:
        h = _P5
    h = (h + n) & _M
    while i + 8 <= n:
        h = (_rotl(h ^ _round(0, word(i)), 27) * _P1 + _P4) & _M
        i += 8
    if i + 4 <= n:
        h = (_rotl(h ^ (word(i, 4) * _P1 & _M), 23) * _P2 + _P3) & _M
        i += 4
    while i < n:
        h = _rotl(h ^ (data[i] * _P5 & _M), 11) * _P1 & _M
        i += 1
    h = (h ^ (h >> 33)) * _P2 & _M
    h = (h ^ (h >> 29)) * _P3 & _M
    return h ^ (h >> 32)


def libxxhash():
    """The system's libxxhash through ctypes, or None where it is not installed."""
    import ctypes
    import ctypes.util
    name = ctypes.util.find_library("xxhash")
    if name is None:
        return None
    lib = ctypes.CDLL(name)
    lib.XXH64.restype, lib.XXH64.argtypes = ctypes.c_uint64, [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint64]
    return lib


@unittest.skipIf(STATS is None, "no C compiler: the probe takes the torch path (tested everywhere else)")
class NativeStatsTest(unittest.TestCase):
    def test_sum_of_squares_and_nonzeros_over_the_vector_loop_and_its_tail(self):
        a = torch.tensor([3.0, -4.0, 0.0, -0.0, 12.0])  # shorter than a vector step: the tail alone
        b = torch.arange(-18.0, 19.0)  # 37: two 16-wide steps and a tail of 5; one 0
        c = torch.zeros(32)  # vector steps of zeros only
        s, nz, n = STATS.grad_stats_of([a, b, c])
        self.assertEqual(s, 169.0 + 2 * sum(i * i for i in range(19)))
        self.assertEqual(nz, 3 + 36)
        self.assertEqual(n, 5 + 37 + 32)

    def test_squares_are_summed_in_double(self):
        # each element's square (1e40) overflows float32; BLAS's float32 dot reads inf here
        x = torch.full((1 << 16,), 1e20)
        s, nz, _ = STATS.grad_stats_of([x])
        want = (1 << 16) * float(x[0]) ** 2
        self.assertTrue(math.isinf(torch.dot(x, x).item()))
        self.assertLess(abs(s - want), 1e-12 * want)
        self.assertEqual(nz, 1 << 16)

    def test_nan_and_inf(self):
        s, nz, _ = STATS.grad_stats_of([torch.tensor([1.0, float("nan")] + [0.0] * 20)])
        self.assertTrue(math.isnan(s))  # the probe then drops the zero fraction
        self.assertEqual(nz, 2)
        s, nz, _ = STATS.grad_stats_of([torch.tensor([float("inf")] + [0.0] * 17)])
        self.assertEqual((s, nz), (math.inf, 1))

    def test_update_stats_refresh_the_snapshot_in_the_same_pass(self):
        p = [torch.arange(1.0, 21.0), torch.tensor([[2.0, -2.0], [0.5, 0.0]])]  # 20 + 4: vector steps and tails
        before = torch.zeros(24)
        self.assertTrue(STATS.gather_of(p, before))
        self.assertEqual(before.tolist(), list(range(1, 21)) + [2.0, -2.0, 0.5, 0.0])
        p[0][3] += 2.0
        p[1][1, 1] = -1.0
        ps, us = STATS.update_stats_of(p, before)
        self.assertEqual(ps, sum(float(v) ** 2 for t in p for v in t.reshape(-1).tolist()))
        self.assertEqual(us, 4.0 + 1.0)
        self.assertEqual(before.tolist(), p[0].tolist() + p[1].reshape(-1).tolist())
        ps2, us2 = STATS.update_stats_of(p, before)  # nothing changed since
        self.assertEqual((ps2, us2), (ps, 0.0))

    def test_whole_blocks_sum_in_float32_and_the_blocks_in_double(self):
        # 1000 elements: three whole blocks of 256 and a tail of 232; small integers: every sum exact
        x = (torch.arange(1000) % 31 - 15).float()
        y = torch.zeros(512)  # two blocks of zeros
        s, nz, n = STATS.grad_stats_of([x, y])
        self.assertEqual(s, float((x.double() ** 2).sum()))
        self.assertEqual(nz, int((x != 0).sum()))
        self.assertEqual(n, 1512)

    def test_a_block_whose_float32_sum_is_not_finite_is_summed_again_in_double(self):
        x = torch.ones(1024)
        x[300] = 3e19  # its square overflows float32: block 1 is summed again in double, the others not
        s, nz, _ = STATS.grad_stats_of([x])
        want = 1023.0 + float(x[300]) ** 2
        self.assertLess(abs(s - want), 1e-12 * want)
        self.assertEqual(nz, 1024)
        x[700] = float("nan")  # a NaN in a block: the sum is NaN (the probe then drops the count)
        self.assertTrue(math.isnan(STATS.grad_stats_of([x])[0]))
        p, before = [torch.ones(768)], torch.zeros(768)
        p[0][600] = -2e20  # the update's blocks too: the snapshot is refreshed on both ways
        ps, us = STATS.update_stats_of(p, before)
        want = 767.0 + float(p[0][600]) ** 2
        self.assertLess(abs(ps - want), 1e-12 * want)
        self.assertLess(abs(us - want), 1e-12 * want)
        self.assertTrue(torch.equal(before, p[0]))

    def test_a_block_of_tiny_values_is_summed_again_in_double(self):
        # squares under float32's smallest normal (~1.2e-38, elements under ~1.1e-19) lose their digits or
        # become 0 in a float32 block sum: a vanishing gradient would read grad_norm 0 with every element
        # nonzero. Such a block (its float32 sum under 2^-100, and not all zeros) is summed in double.
        for scale in (1e-20, 1e-30, 1e-44):
            x = torch.full((1024,), scale)
            x[::3] = -scale
            want = float((x.double() ** 2).sum())
            s, nz, _ = STATS.grad_stats_of([x])
            self.assertEqual(nz, 1024)
            self.assertLess(abs(s - want), 1e-12 * want, scale)
            before = torch.zeros(1024)
            ps, us = STATS.update_stats_of([x], before)
            self.assertLess(abs(ps - want), 1e-12 * want, scale)
            self.assertLess(abs(us - want), 1e-12 * want, scale)  # the update from 0: the elements themselves
            self.assertTrue(torch.equal(before, x))
        # a tiny update of ordinary parameters: the parameters' sum stays in float32, the update's not
        p = torch.full((512,), 1e-13)
        before = p.clone()
        p[7] = torch.nextafter(p[7], torch.tensor(1.0))  # a step of float32's spacing there (~1.3e-20)
        d = float((p[7] - before[7]).double())
        ps, us = STATS.update_stats_of([p], before)
        self.assertGreater(d, 0.0)
        self.assertLess(abs(us - d * d), 1e-12 * d * d)
        # blocks of exact zeros still take the float32 sum: 0, not NaN
        self.assertEqual(STATS.grad_stats_of([torch.zeros(1024), torch.full((256,), -0.0)])[:2], (0.0, 0))

    def test_float32_blocks_keep_the_relative_error_under_2e_6(self):
        torch.manual_seed(0)
        xs = [torch.randn(100_003) * 1e-3, torch.randn(4096) * 50.0, torch.randn(257)]
        s, _, _ = STATS.grad_stats_of(xs)
        want = sum(float((x.double() ** 2).sum()) for x in xs)
        self.assertLess(abs(s - want), 2e-6 * want)
        before = torch.cat([x + torch.randn_like(x) * 1e-4 for x in xs])
        d = torch.cat(xs) - before  # in float32, as the pass takes it
        ps, us = STATS.update_stats_of(xs, before)
        self.assertLess(abs(ps - want), 2e-6 * want)
        want_us = float((d.double() ** 2).sum())
        self.assertLess(abs(us - want_us), 2e-6 * want_us)

    def test_the_batch_hash_is_xxh64_of_the_bytes_joined(self):
        torch.manual_seed(0)
        for sizes in ([0], [1], [3], [31], [32], [33], [16, 17], [5, 0, 27], [256, 3, 1000], [4096, 4096]):
            ts = [torch.randint(-1 << 40, 1 << 40, (n,)) for n in sizes] + [torch.randn(5)]
            joined = b"".join(t.numpy().tobytes() for t in ts)
            self.assertEqual(STATS.xxh64_of(ts), f"{xxh64(joined):016x}", sizes)
            lib = libxxhash()
            if lib is not None:  # the reference implementation, where the machine has it
                self.assertEqual(STATS.xxh64_of(ts), f"{lib.XXH64(joined, len(joined), 0):016x}", sizes)
        t = torch.arange(16, dtype=torch.int32).reshape(4, 4)
        self.assertEqual(STATS.xxh64_of([t.t()]), STATS.xxh64_of([t.t().contiguous()]))  # its bytes, in order
        self.assertNotEqual(STATS.xxh64_of([t.t()]), STATS.xxh64_of([t]))
        self.assertIsNone(STATS.xxh64_of([torch.ones(4).to_sparse()]))

    def test_a_conjugate_or_negative_view_is_hashed_as_its_values(self):
        # z.conj() shares z's memory (a bit says "conjugate"): its values are not z's
        z = torch.randn(6, dtype=torch.complex64)
        self.assertEqual(STATS.xxh64_of([z.conj()]), f"{xxh64(z.conj().resolve_conj().numpy().tobytes()):016x}")
        self.assertNotEqual(STATS.xxh64_of([z.conj()]), STATS.xxh64_of([z]))
        im = z.conj().imag  # a view of z's memory with the negative bit
        self.assertTrue(im.is_neg())
        self.assertEqual(STATS.xxh64_of([im]), f"{xxh64((-z.imag).numpy().tobytes()):016x}")
        self.assertEqual(STATS.xxh64_of([z.conj()[::2]]), STATS.xxh64_of([z.conj().resolve_conj()[::2]]))

    def test_the_update_pass_checks_its_tensors_again_where_a_pointer_or_size_moved(self):
        stats = native.Stats(STATS.lib)  # a fresh one: nothing checked yet
        p = [torch.randn(300), torch.randn(40)]
        before = torch.empty(340)
        self.assertTrue(stats.gather_of(p, before))
        p[0].add_(1.0)
        versions = []
        ps, us = stats.update_stats_of(p, before, versions)  # checked in full
        self.assertAlmostEqual(us, 300.0, places=3)
        self.assertEqual(versions, [1, 0])
        p[1].mul_(2.0)
        versions = []
        ps, us = stats.update_stats_of(p, before, versions)  # the same pointers and sizes: not checked again
        self.assertAlmostEqual(ps, float(sum((t.double() ** 2).sum() for t in p)), delta=1e-5 * ps)
        self.assertEqual(versions, [1, 1])  # read all the same
        p[1].data = p[1].data.double()  # a new pointer (an id and a version that did not move)
        self.assertIsNone(stats.update_stats_of(p, before))
        p[1].data = torch.randn(41)  # float32 again, another size
        self.assertIsNone(stats.update_stats_of(p, before))  # (not the snapshot's total)
        self.assertIsNone(stats.update_stats_of([torch.ones(3).to_sparse()], torch.empty(3)))  # no storage

    def test_a_tensor_without_memory_of_its_own_takes_the_torch_path(self):
        # a jagged nested tensor (an nn.Parameter may hold one) and a MaskedTensor (a tensor subclass over
        # two tensors) are float32, on the CPU, "contiguous", and their data_ptr() is 0 without raising:
        # no pass may read there (a child process: a read of address 0 would end this one), and plain()
        # says so too (UpdateNorms takes the native path on its word)
        import subprocess
        import sys
        code = (
            "import torch, warnings\n"
            "warnings.simplefilter('ignore')\n"
            "from torch.masked import masked_tensor\n"
            "from flatline_probe import native\n"
            "s = native.load()\n"
            "n = torch.nested.nested_tensor([torch.ones(2, 3), torch.ones(4, 3)], layout=torch.jagged)\n"
            "m = masked_tensor(torch.ones(18), torch.ones(18, dtype=torch.bool))\n"
            "for t in (n, m):\n"
            "    print(s.grad_stats_of([t]), s.gather_of([t], torch.empty(18)),"
            " s.update_stats_of([t], torch.empty(18)), s.xxh64([t]), s.plain([t]))\n")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
        self.assertEqual((r.returncode, r.stdout), (0, "None False None None False\n" * 2), r.stderr[-2000:])

    def test_other_tensors_take_the_torch_path(self):
        self.assertIsNone(STATS.grad_stats_of([torch.ones(4), torch.ones(4, dtype=torch.float64)]))
        self.assertIsNone(STATS.grad_stats_of([torch.ones(4, 4).t()[0]]))  # not contiguous
        self.assertIsNone(STATS.grad_stats_of([torch.ones(4, dtype=torch.float16)]))
        self.assertFalse(STATS.gather_of([torch.ones(4)], torch.empty(5)))  # not the total size
        self.assertIsNone(STATS.update_stats_of([torch.ones(4)], torch.empty(3)))
        self.assertIsNone(STATS.update_stats_of([torch.ones(4)], torch.empty(4, dtype=torch.float64)))


class NativeLoadTest(unittest.TestCase):
    def setUp(self):
        self.saved = dict(native._loaded)
        native._loaded.clear()

    def tearDown(self):
        native._loaded.clear()
        native._loaded.update(self.saved)

    def test_turned_off_by_its_variable(self):
        with mock.patch.dict(os.environ, {native.NATIVE_ENV: "0"}):
            self.assertIsNone(native.load())

    def test_a_compiler_that_fails_leaves_the_torch_path_and_says_why(self):
        with tempfile.TemporaryDirectory() as cache, \
                mock.patch.dict(os.environ, {native.CC_ENV: "false", native.CACHE_ENV: cache}), \
                mock.patch("sys.stderr") as err:
            self.assertIsNone(native.load(say=True))
            said = "".join(c.args[0] for c in err.write.call_args_list)
            self.assertIn("statistics run as torch calls", said)
            self.assertIn("false exited with status 1", said)
            self.assertEqual(os.listdir(os.path.join(cache, "flatline-probe")), [])  # no half-written file

    def test_no_compiler_on_the_path(self):
        with mock.patch.dict(os.environ, {native.CC_ENV: "no-such-cc-here"}):
            self.assertIsNone(native.load())
            self.assertIn("no C compiler (no-such-cc-here)", native._why)

    @unittest.skipIf(STATS is None, "no C compiler")
    def test_built_once_into_the_cache_then_loaded_from_it(self):
        with tempfile.TemporaryDirectory() as cache, mock.patch.dict(os.environ, {native.CACHE_ENV: cache}):
            self.assertIsNotNone(native.load())
            (built,) = os.listdir(os.path.join(cache, "flatline-probe"))
            self.assertRegex(built, r"^stats-[0-9a-f]{16}\.so$")
            native._loaded.clear()
            with mock.patch("subprocess.run", side_effect=AssertionError("compiled again")):
                self.assertIsNotNone(native.load())


    @unittest.skipIf(STATS is None, "no C compiler")
    def test_a_damaged_library_in_the_cache_is_built_again(self):
        with tempfile.TemporaryDirectory() as cache, mock.patch.dict(os.environ, {native.CACHE_ENV: cache}):
            path = native._library_path(os.environ.get(native.CC_ENV) or "cc")
            os.makedirs(os.path.dirname(path))
            with open(path, "wb") as f:  # what a full disk leaves
                f.write(b"\x7fELF cut short")
            stats = native.load()
            self.assertIsNotNone(stats)
            self.assertEqual(stats.grad_stats_of([torch.tensor([3.0, 4.0])]), (25.0, 2, 2))
            self.assertGreater(os.path.getsize(path), 1000)


    @unittest.skipIf(STATS is None, "no C compiler")
    def test_a_compiler_with_arguments_or_a_cpp_driver_builds_it_as_c(self):
        import shutil
        for cc in ("cc -O1", "g++", "c++"):
            if shutil.which(cc.split()[0]) is None:
                continue
            native._loaded.clear()
            with tempfile.TemporaryDirectory() as cache, \
                    mock.patch.dict(os.environ, {native.CC_ENV: cc, native.CACHE_ENV: cache}):
                stats = native.load()
                self.assertIsNotNone(stats, (cc, native._why))
                self.assertEqual(stats.grad_stats_of([torch.tensor([3.0, 0.0, 4.0])]), (25.0, 2, 3))

    def test_a_compiler_that_writes_nothing_leaves_nothing_in_the_cache(self):
        with tempfile.TemporaryDirectory() as cache, \
                mock.patch.dict(os.environ, {native.CC_ENV: "true", native.CACHE_ENV: cache}):
            self.assertIsNone(native.load())
            self.assertIn("wrote no library", native._why)
            self.assertEqual(os.listdir(os.path.join(cache, "flatline-probe")), [])

    @unittest.skipIf(STATS is None, "no C compiler")
    def test_another_library_under_the_cache_name_is_built_again(self):
        import subprocess
        with tempfile.TemporaryDirectory() as cache, mock.patch.dict(os.environ, {native.CACHE_ENV: cache}):
            path = native._library_path(os.environ.get(native.CC_ENV) or "cc")
            os.makedirs(os.path.dirname(path))
            src = os.path.join(cache, "other.c")
            with open(src, "w") as f:
                f.write("int other(void) { return 1; }\n")
            subprocess.run(["cc", "-shared", "-fPIC", "-o", path, src], check=True)
            stats = native.load()
            self.assertIsNotNone(stats, native._why)
            self.assertEqual(stats.grad_stats_of([torch.tensor([3.0, 4.0])]), (25.0, 2, 2))


class UpdateNormsTest(unittest.TestCase):
    """The same updates through both paths give the same norms; a parameter changed between updates
    (outside the optimizer) makes a new snapshot on both."""

    def run_updates(self, stats):
        torch.manual_seed(0)
        params = [torch.randn(37), torch.randn(5, 8)]
        key = (1, 2)
        u, out = UpdateNorms(stats), []
        for i in range(4):
            if i == 2:
                params[0].add_(10.0)  # not an update: must not count as one
            u.before(params, key)
            # the update: -0.5 on each of the 37, and 10% off the second tensor
            want_us = 37 * 0.25 + float(((0.1 * params[1].double()) ** 2).sum())
            params[0].sub_(0.5)
            params[1].mul_(0.9)
            got = dict(u.after(params, key))
            u.forget()
            want_ps = sum(float((p.double() ** 2).sum()) for p in params)
            out.append((float(got["param_sq"]), float(got["update_sq"]), want_ps, want_us))
        return out

    def test_both_paths_give_the_exact_norms_and_agree(self):
        paths = [None] + ([STATS] if STATS is not None else [])
        for stats in paths:
            for i, (ps, us, want_ps, want_us) in enumerate(self.run_updates(stats)):
                self.assertLess(abs(ps - want_ps), 1e-5 * want_ps, (stats, i))
                self.assertLess(abs(us - want_us), 1e-4 * want_us, (stats, i))
        if len(paths) == 2:
            for a, b in zip(self.run_updates(None), self.run_updates(STATS)):
                self.assertLess(abs(a[0] - b[0]), 1e-5 * a[0])
                self.assertLess(abs(a[1] - b[1]), 1e-4 * a[1])

    def test_no_snapshot_before_the_update_gives_the_parameter_norm_only(self):
        for stats in [None] + ([STATS] if STATS is not None else []):
            u = UpdateNorms(stats)
            p = [torch.tensor([3.0, 4.0])]
            got = dict(u.after(p, 7))
            self.assertEqual(set(got), {"param_sq"})
            self.assertEqual(float(got["param_sq"]), 25.0)
            u.forget()
            u.before(p, 7)  # unchanged since: the snapshot after the last update stands
            p[0].add_(1.0)
            got = dict(u.after(p, 7))
            self.assertEqual(float(got["update_sq"]), 2.0, stats)

    def test_a_parameter_resized_in_place_of_its_data_makes_a_new_snapshot(self):
        # `p.data = ...` of another shape keeps the parameter's id (the key): no crash, no stale update
        for stats in [None] + ([STATS] if STATS is not None else []):
            u = UpdateNorms(stats)
            p = [torch.ones(5), torch.ones(3)]
            u.before(p, 1)
            p[0].add_(1.0)
            self.assertEqual(float(dict(u.after(p, 1))["update_sq"]), 5.0, stats)
            u.forget()
            p[1].data = torch.ones(9)  # grown between updates (no version counter moves for .data)
            u.before(p, 1)
            p[1].add_(2.0)
            got = dict(u.after(p, 1))
            self.assertEqual(float(got["param_sq"]), 5 * 4.0 + 9 * 9.0, stats)
            self.assertEqual(float(got.get("update_sq", 9 * 4.0)), 9 * 4.0, stats)
            u.forget()
            u.before(p, 1)
            p[0].sub_(1.0)
            got = dict(u.after(p, 1))
            self.assertEqual(float(got["update_sq"]), 5.0, stats)

    def test_a_model_made_float64_is_copied_again(self):
        p = [torch.ones(4)]
        u = UpdateNorms(None)
        u.before(p, 1)
        u.after(p, 1)
        u.forget()
        p[0].data = p[0].data.double()  # model.double(): the same id, another dtype
        u.before(p, 1)
        p[0].add_(1e-9)
        got = dict(u.after(p, 1))
        self.assertAlmostEqual(float(got["update_sq"]), 4e-18, delta=1e-24)

    def retyped_after_a_native_snapshot(self, retype, change):
        """Parameters whose update left a native snapshot, then retyped in place of their data (`p.data =
        retype(p.data)`, which moves no version counter: before() keeps that snapshot, and after() finds
        the tensors not plain any more and takes the update from it) and changed by `change` under
        no_grad: (the parameters, the UpdateNorms, what after() gave)."""
        p = [torch.ones(300), torch.full((5,), 2.0)]
        u = UpdateNorms(STATS)
        u.before(p, 1)
        u.after(p, 1)
        u.forget()
        versions = [t._version for t in p]
        for t in p:
            t.data = retype(t.data)
        self.assertEqual([t._version for t in p], versions)
        u.before(p, 1)
        with torch.no_grad():
            change(p)
        return p, u, u.after(p, 1)  # (the probe sums a statistic's values)

    def then_the_torch_paths_snapshot(self, p, u, change):
        """The next update after it, from the torch path's snapshot: its update_sq."""
        u.forget()
        u.before(p, 1)
        with torch.no_grad():
            change(p)
        return float(dict(u.after(p, 1))["update_sq"])

    @unittest.skipIf(STATS is None, "no C compiler")
    def test_a_native_snapshot_made_float64_under_the_same_version_still_gives_the_update(self):
        def change(p):
            p[0][0] += 0.5
            p[1][4] -= 0.25
        p, u, got = self.retyped_after_a_native_snapshot(lambda d: d.double(), change)
        self.assertAlmostEqual(sum(float(v) for k, v in got if k == "update_sq"), 0.25 + 0.0625, places=12)
        self.assertAlmostEqual(sum(float(v) for k, v in got if k == "param_sq"),
                               299.0 + 1.5 ** 2 + 4 * 4.0 + 1.75 ** 2, places=9)
        self.assertAlmostEqual(self.then_the_torch_paths_snapshot(p, u, lambda p: p[1][0].add_(1.0)), 1.0,
                               places=12)

    @unittest.skipIf(STATS is None, "no C compiler")
    def test_a_native_snapshot_made_complex_under_the_same_version_still_gives_the_update(self):
        # the update from the real snapshot is a complex difference, its squared norm the sum of |z|^2 (the
        # imaginary parts the update made count)
        def change(p):
            p[0][0] += 0.5j
            p[1][4] -= 0.25
        p, u, got = self.retyped_after_a_native_snapshot(lambda d: d.to(torch.complex64), change)
        self.assertAlmostEqual(sum(float(v) for k, v in got if k == "update_sq"), 0.25 + 0.0625, places=12)
        self.assertAlmostEqual(sum(float(v) for k, v in got if k == "param_sq"),
                               299.0 + 1.25 + 4 * 4.0 + 1.75 ** 2, places=9)
        self.assertAlmostEqual(self.then_the_torch_paths_snapshot(p, u, lambda p: p[1][0].add_(1.0j)), 1.0,
                               places=12)

if __name__ == "__main__":
    unittest.main()
