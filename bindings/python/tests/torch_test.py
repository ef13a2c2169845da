"""CPU torch tensors through the Python binding (one process, world_size 1).

Skipped, with the message "skipped: python3-torch not installed", when torch
cannot be imported.
"""

import sys
import unittest

import hcomm

try:
    import torch
except ImportError:
    torch = None

SKIP_MESSAGE = "skipped: python3-torch not installed"


def setUpModule():
    if torch is None:
        print(SKIP_MESSAGE, file=sys.stderr, flush=True)
        raise unittest.SkipTest(SKIP_MESSAGE)
    hcomm.init(rank=0, world_size=1, timeout_ms=5000)


def tearDownModule():
    hcomm.destroy()


@unittest.skipIf(torch is None, SKIP_MESSAGE)
class TorchTest(unittest.TestCase):
    DTYPES = ["int8", "uint8", "int32", "int64", "float16", "bfloat16", "float32", "float64"]

    def test_dtypes_send_to_self_and_all_reduce(self):
        for name in self.DTYPES:
            dt = getattr(torch, name)
            a = (torch.arange(12) % 50).to(dt).reshape(3, 4)
            b = torch.zeros_like(a)
            r = hcomm.irecv(b, src=0, tag=1)
            hcomm.send(a, dst=0, tag=1)
            r.wait()
            self.assertTrue(torch.equal(a, b), name)
            self.assertEqual(r.count, 12)
            hcomm.all_reduce(b, op=hcomm.ReduceOp.MAX)
            self.assertTrue(torch.equal(a, b), name)
            buf = hcomm._tensors.as_buffer(a, False)
            self.assertEqual(buf.dtype_name, name)

    def test_zero_copy_in_place(self):
        base = torch.zeros(10, dtype=torch.float32)
        view = base[2:6]  # Contiguous view of base.
        r = hcomm.irecv(view, src=0, tag=2)
        hcomm.send(torch.tensor([1.0, 2.0, 3.0, 4.0]), dst=0, tag=2)
        r.wait()
        self.assertEqual(base.tolist(), [0, 0, 1, 2, 3, 4, 0, 0, 0, 0])
        buf = hcomm._tensors.as_buffer(base, True)
        self.assertEqual(buf.address(), base.data_ptr())

    def test_requires_grad_and_scalar(self):
        w = torch.ones(3, requires_grad=True)
        hcomm.all_reduce(w)  # In place on the data, outside autograd.
        s = torch.tensor(2.5)
        hcomm.broadcast(s, src=0)
        self.assertEqual(float(s), 2.5)

    def test_errors(self):
        t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
        with self.assertRaisesRegex(hcomm.InvalidArgumentError, "not contiguous"):
            hcomm.all_reduce(t.t())
        with self.assertRaisesRegex(hcomm.InvalidArgumentError, "unsupported dtype"):
            hcomm.all_reduce(torch.zeros(2, dtype=torch.int16))
        with self.assertRaisesRegex(hcomm.InvalidArgumentError, "unsupported dtype"):
            hcomm.all_reduce(torch.zeros(2, dtype=torch.bool))
        if torch.cuda.is_available():
            with self.assertRaisesRegex(hcomm.InvalidArgumentError, "CPU"):
                hcomm.all_reduce(torch.zeros(2, device="cuda"))


if __name__ == "__main__":
    unittest.main(verbosity=2)
