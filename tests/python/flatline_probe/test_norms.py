"""The probe's statistics over flat copies (python/flatline_probe/norms.py, docs/DESIGN.md §16): exact
values on small tensors, and the GPU batch hash's words computed here on CPU tensors."""
import math
import unittest

import torch

from flatline_probe.norms import FlatCopy, device_hash_words, hash_of_words, nonzeros, nonzeros_, scratch_dtype, sq_norm


def words_hash(tensors):
    return hash_of_words([int(w) for w in device_hash_words(tensors).tolist()])


class NormsTest(unittest.TestCase):
    def test_sq_norm_is_the_sum_of_squares_in_each_dtype(self):
        x = torch.tensor([3.0, -4.0, 0.0, 12.0])
        self.assertEqual(sq_norm(x).item(), 169.0)
        self.assertEqual(sq_norm(x.double()).item(), 169.0)
        self.assertEqual(sq_norm(x.half()).item(), 169.0)  # not BLAS: vector_norm in float32
        self.assertEqual(sq_norm(x.bfloat16()).item(), 169.0)

    def test_nonzeros_counts_minus_zero_as_zero(self):
        x = torch.tensor([0.0, -0.0, 1e-30, -2.0, 0.0, 5.0])
        self.assertEqual(nonzeros_(x.clone()).item(), 3.0)
        self.assertEqual(nonzeros_(torch.tensor([float("inf"), 0.0])).item(), 1.0)
        # a NaN's sign is 0: the probe drops the count where the squared norm is NaN (test_probe)
        nan = torch.tensor([1.0, float("nan"), 0.0])
        self.assertTrue(math.isnan(sq_norm(nan).item()))
        self.assertEqual(nonzeros_(nan).item(), 1.0)

    def test_nonzeros_into_a_buffer_leaves_the_tensor_and_counts_exactly_in_every_dtype(self):
        x = torch.tensor([0.0, -0.0, 1e-3, -2.0, 0.0, 5.0, 7.0])
        for dtype, want in ((torch.float32, torch.float32), (torch.float64, torch.float64),
                            (torch.float16, torch.float32), (torch.bfloat16, torch.float32)):
            t = x.to(dtype)
            before = t.clone()
            self.assertEqual(scratch_dtype(t), want)
            out = torch.full(t.shape, 9.0, dtype=scratch_dtype(t))  # stale values from an earlier bucket
            self.assertEqual(nonzeros(t, out).item(), 4.0, dtype)
            self.assertTrue(torch.equal(t, before), dtype)  # the bucket is the optimizer's: not overwritten
        big = torch.ones(1 << 20, dtype=torch.float16)  # 2^20 signs summed exactly (float32 accumulation)
        big[::3] = 0
        self.assertEqual(nonzeros(big, torch.empty(big.shape)).item(), float(int((big != 0).sum())))

    def test_flat_copy_holds_the_tensors_values_in_their_order(self):
        a, b = torch.arange(6.0).reshape(2, 3), torch.tensor([7.0, 8.0])
        fc = FlatCopy()
        (flat,) = fc.copy([a, b], key=1)
        self.assertEqual(flat.tolist(), [0, 1, 2, 3, 4, 5, 7, 8])
        self.assertEqual(flat.dtype, torch.float32)
        a.add_(1)  # a copy, not a view of the tensors
        self.assertEqual(flat[0].item(), 0.0)
        buf = flat.data_ptr()
        (flat,) = fc.copy([a, b], key=1)  # the same key: the same buffer, new values
        self.assertEqual(flat.data_ptr(), buf)
        self.assertEqual(flat.tolist(), [1, 2, 3, 4, 5, 6, 7, 8])
        (flat,) = fc.copy([b], key=2)  # another list: made again
        self.assertEqual(flat.tolist(), [7, 8])
        self.assertEqual(fc.nbytes(), 8)

    def test_flat_copy_holds_a_complex_tensor_as_its_real_and_imaginary_parts(self):
        z = torch.tensor([3 + 4j, -1j, 0j], dtype=torch.complex64)
        r = torch.tensor([2.0])
        fc = FlatCopy()
        (flat,) = fc.copy([z, r], key=1)
        self.assertEqual(flat.dtype, torch.float32)
        self.assertEqual(flat.tolist(), [3, 4, 0, -1, 0, 0, 2])  # not the real parts alone
        self.assertEqual(sq_norm(flat).item(), 25 + 1 + 4)  # the sum of |z|^2
        (flat,) = fc.copy([z.conj(), r], key=1)  # a conjugate view: its values, not its memory
        self.assertEqual(flat.tolist(), [3, -4, 0, 1, 0, 0, 2])
        (flat,) = FlatCopy().copy([z.to(torch.complex128)], key=2)  # complex128 keeps its float64 parts
        self.assertEqual(flat.dtype, torch.float64)
        self.assertEqual(flat.tolist(), [3, 4, 0, -1, 0, 0])

    def test_flat_copy_keeps_float64_and_reads_half_precision_exactly(self):
        fc = FlatCopy()
        (flat,) = fc.copy([torch.tensor([0.1], dtype=torch.float64), torch.tensor([1.5]).half()], key=0)
        self.assertEqual(flat.dtype, torch.float64)
        self.assertEqual(flat.tolist(), [0.1, 1.5])
        fc.release()
        self.assertEqual(fc.flats, [])
        self.assertIsNone(fc.key)

    def test_device_hash_tells_batches_apart_and_equal_ones_alike(self):
        x = torch.arange(64).reshape(2, 32)
        y = torch.randn(2, 32)
        h = words_hash([x, y])
        self.assertRegex(h, "^[0-9a-f]{16}$")
        self.assertEqual(words_hash([x.clone(), y.clone()]), h)
        x2 = x.clone()
        x2[1, 31] += 1
        self.assertNotEqual(words_hash([x2, y]), h)
        self.assertNotEqual(words_hash([x.flip(1), y]), h)  # the order of the elements counts
        self.assertNotEqual(words_hash([x[:, :16], y]), h)  # and how many there are
        y2 = y.clone()
        y2[0, 0] = torch.nextafter(y2[0, 0], torch.tensor(10.0))  # a float's last bit
        self.assertNotEqual(words_hash([x, y2]), h)
        self.assertNotEqual(words_hash([x, y.half()]), h)

    def test_device_hash_of_a_conjugate_or_negative_view_is_its_values(self):
        z = torch.randn(2, 16, dtype=torch.complex64)
        self.assertEqual(words_hash([z.conj()]), words_hash([z.conj().resolve_conj()]))
        im = z.conj().imag  # the negative bit
        self.assertEqual(words_hash([im]), words_hash([-z.imag]))
        self.assertNotEqual(words_hash([im]), words_hash([z.imag]))

    def test_device_hash_tells_a_64_bit_elements_top_bit(self):
        # a wrapping sum of element x weight sees bit 63 of an element only through its weight's parity:
        # hashed whole, about half of these would be equal to the batch they differ from
        g = torch.Generator().manual_seed(3)
        for n in range(1, 17):
            x = torch.rand(n, dtype=torch.float64, generator=g) + 0.5
            self.assertNotEqual(words_hash([-x]), words_hash([x]), n)  # every sign
            z = torch.complex(torch.rand(n, generator=g) + 0.5, torch.rand(n, generator=g) + 0.5)
            self.assertNotEqual(words_hash([z.conj().resolve_conj()]), words_hash([z]), n)
            i = torch.randint(1, 1 << 40, (n,), generator=g)
            self.assertNotEqual(words_hash([i | (-(1 << 63))]), words_hash([i]), n)  # int64's top bit
        x = torch.rand(16, dtype=torch.float64, generator=g) + 0.5
        for j in range(16):  # one element's sign
            y = x.clone()
            y[j] = -y[j]
            self.assertNotEqual(words_hash([y]), words_hash([x]), j)

    def test_device_hash_of_complex128_is_its_values(self):
        z = torch.randn(3, 5, dtype=torch.complex128)
        h = words_hash([z])
        self.assertEqual(words_hash([z.clone()]), h)
        self.assertNotEqual(words_hash([z.conj().resolve_conj()]), h)
        self.assertEqual(words_hash([z.conj()]), words_hash([z.conj().resolve_conj()]))
        self.assertNotEqual(words_hash([z.to(torch.complex64)]), h)

    def test_device_hash_of_a_strided_1d_64_bit_tensor_is_its_values(self):
        # a column of an int64 batch (labels = data[:, 0]), every other element, a broadcast scalar: 1-D
        # views whose elements are not adjacent, hashed as their values' contiguous copy
        data = torch.arange(40).reshape(8, 5)
        for t in (data[:, 0], data.reshape(-1)[::2], torch.tensor(7).expand(8),
                  data.double()[:, 1], data.to(torch.complex128)[:, 2].real):
            self.assertEqual(words_hash([t]), words_hash([t.contiguous()]), t.dtype)
        self.assertNotEqual(words_hash([data[:, 0]]), words_hash([data[:, 1]]))

    def test_device_hash_of_a_batch_on_several_devices_gathers_its_words_on_one(self):
        # a GPU batch beside a CPU tensor (pack_padded_sequence's lengths must stay on the CPU), or a
        # model split over GPUs: each tensor summed where it is, the words on the first device not the
        # CPU (here "meta" stands for a GPU: no values, only where the words end up)
        w = device_hash_words([torch.arange(6), torch.ones(3, device="meta"), torch.ones(2, dtype=torch.int64)])
        self.assertEqual(w.device.type, "meta")
        self.assertEqual(tuple(w.shape), (9,))

    @unittest.skipUnless(torch.cuda.is_available(), "needs a GPU")
    def test_device_hash_of_a_batch_on_a_gpu_and_the_cpu_is_its_values(self):
        x, lengths = torch.randn(4, 8), torch.tensor([8, 5, 3, 1])
        h = words_hash([x.cuda(), lengths.cuda()])
        self.assertEqual(words_hash([x.cuda(), lengths]), h)
        self.assertEqual(device_hash_words([x.cuda(), lengths]).device, x.cuda().device)
        self.assertNotEqual(words_hash([x.cuda(), lengths.flip(0)]), h)

    def test_device_hash_words_are_exact_in_a_double(self):
        w = device_hash_words([torch.full((1000,), -(1 << 62), dtype=torch.int64)])
        self.assertEqual(w.dtype, torch.float64)
        for v in w.tolist()[:2]:  # the two 32-bit halves of the weighted sum
            self.assertEqual(v, int(v))
            self.assertGreaterEqual(v, 0)
            self.assertLess(v, 1 << 32)
        self.assertEqual(w.tolist()[2], 1000.0)


if __name__ == "__main__":
    unittest.main()
