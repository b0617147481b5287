"""Unit tests of the Python worker without a GPU (numpy only): the frames, the decorator, the
mapping of a call's slots onto the function's arguments and back, the IPC handle cache, and the
device path through the host stand-in of CUDA IPC (POSIX shared memory), bench included.

    python3 -m unittest discover -s python/tests   (ctest: python_worker_unit)
"""
import base64
import io
import mmap
import os
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import bitcheck_py  # noqa: E402
from bitcheck_py import __main__ as worker  # noqa: E402
from bitcheck_py import calls, cuda_ipc  # noqa: E402

ARRAYS = calls.NumpyArrays()


def matmul_call(slot_rows, k=8, n=5, dtype="fp32"):
    """A matmul call over numpy arrays: x (slots, k) with NaN pad rows, w (n, k), y (slots, n)
    poisoned with NaN, as bitcheck prepares them."""
    rng = np.random.default_rng(7)
    slots = len(slot_rows)
    x = rng.standard_normal((slots, k)).astype(np.float32)
    for slot, row in enumerate(slot_rows):
        if row < 0:
            x[slot] = np.nan
    w = rng.standard_normal((n, k)).astype(np.float32)
    y = np.full((slots, n), np.nan, dtype=np.float32)
    tensors = [{"name": "x", "role": "row_input", "dtype": dtype, "shape": [slots, k]},
               {"name": "w", "role": "parameter", "dtype": dtype, "shape": [n, k]},
               {"name": "y", "role": "row_output", "dtype": dtype, "shape": [slots, n]}]
    call = {"op": "matmul", "pass": "forward", "slot_rows": slot_rows, "tensors": tensors,
            "invocation_index": 0, "invocation_count": 1, "segments": []}
    return call, [(tensors[0], x), (tensors[1], w), (tensors[2], y)]


class FramesAndDeclarations(unittest.TestCase):
    def test_a_frame_is_a_little_endian_length_then_json(self):
        stream = io.BytesIO()
        worker.write_message(stream, {"ok": True, "text": "é"})
        payload = stream.getvalue()
        self.assertEqual(int.from_bytes(payload[:4], "little"), len(payload) - 4)
        self.assertEqual(worker.read_message(io.BytesIO(payload)), {"ok": True, "text": "é"})
        self.assertIsNone(worker.read_message(io.BytesIO(b"")))

    def test_the_decorator_records_backend_and_library_default(self):
        @bitcheck_py.impl(op="matmul", backend="cuda", library_default=True, dtypes=("bf16",))
        def linear(x, w):
            return x

        declared = bitcheck_py.declaration(linear)
        self.assertEqual(declared["backend"], "cuda")
        self.assertTrue(declared["library_default"])
        self.assertFalse(declared["invariant"])
        with self.assertRaises(ValueError):
            bitcheck_py.impl(op="matmul", backend="tpu")
        with self.assertRaises(ValueError):
            bitcheck_py.impl(op="matmul", invariant=True, library_default=True)


class SlotMapping(unittest.TestCase):
    def test_real_rows_are_a_view_when_they_are_one_run(self):
        self.assertEqual(calls.real_rows([0, 1, 2]), (slice(None), 3))
        self.assertEqual(calls.real_rows([-1, 4, 5, -1]), (slice(1, 3), 2))
        self.assertEqual(calls.real_rows([3, -1, 4]), ([0, 2], 2))

    def test_the_function_sees_real_rows_only_and_pads_stay_poisoned(self):
        call, views = matmul_call([2, -1, 0, 1, -1])
        seen = []

        def function(x, w):
            seen.append(x.shape)
            self.assertFalse(np.isnan(x).any())
            return x @ w.T

        calls.run(function, call, views, ARRAYS)
        self.assertEqual(seen, [(3, 8)])
        x, w, y = (array for _, array in views)
        for slot in (0, 2, 3):
            np.testing.assert_array_equal(y[slot], x[slot] @ w.T)
        self.assertTrue(np.isnan(y[[1, 4]]).all())

    def test_a_wrong_shape_is_named_with_both_shapes(self):
        call, views = matmul_call([0, 1, 2])
        with self.assertRaisesRegex(calls.ResultError, r"matmul output y: expected shape \(3, 5\) "
                                    r"float32, got shape \(3, 6\) float32"):
            calls.run(lambda x, w: np.zeros((3, 6), np.float32), call, views, ARRAYS)
        with self.assertRaisesRegex(calls.ResultError, r"expected 1 outputs \(y\), got 2"):
            calls.run(lambda x, w: (x, x), call, views, ARRAYS)

    def test_bf16_is_float32_to_the_function_and_rounded_back(self):
        call, views = matmul_call([0, 1], dtype="bf16")
        bits = [(t, calls.float32_to_bf16(a) if t["dtype"] == "bf16" and t["role"] != "row_output"
                 else np.zeros(a.shape, np.uint16)) for t, a in views]
        calls.run(lambda x, w: (x @ w.T).astype(np.float32), call, bits, ARRAYS)
        x = calls.bf16_to_float32(bits[0][1])
        w = calls.bf16_to_float32(bits[1][1])
        np.testing.assert_array_equal(bits[2][1], calls.float32_to_bf16(x @ w.T))

    def test_a_reduction_output_accumulates_the_contribution(self):
        tensors = [{"name": "ids", "role": "row_input", "dtype": "i32", "shape": [3, 1]},
                   {"name": "table", "role": "parameter", "dtype": "fp32", "shape": [4, 2]},
                   {"name": "dout", "role": "row_input", "dtype": "fp32", "shape": [3, 2]},
                   {"name": "dtable", "role": "reduction_output", "dtype": "fp32",
                    "shape": [4, 2]}]
        ids = np.array([[1], [3], [1]], np.int32)
        dout = np.arange(6, dtype=np.float32).reshape(3, 2)
        dtable = np.ones((4, 2), np.float32)
        call = {"op": "embedding", "pass": "backward", "slot_rows": [0, 1, 2]}

        def backward(ids_seen, table, dout_seen):
            self.assertEqual(ids_seen.shape, (3,))  # one value per token, as PyTorch takes it
            grad = np.zeros((4, 2), np.float32)
            np.add.at(grad, ids_seen, dout_seen)
            return grad

        calls.run(backward, call, list(zip(tensors, [ids, np.zeros((4, 2), np.float32), dout,
                                                     dtable])), ARRAYS)
        np.testing.assert_array_equal(dtable[1], 1 + dout[0] + dout[2])
        np.testing.assert_array_equal(dtable[0], [1, 1])

    def test_attention_keeps_a_kv_cache_across_invocations(self):
        heads, dim = 2, 4
        rng = np.random.default_rng(3)
        q_all, k_all, v_all = (rng.standard_normal((5, heads, dim)).astype(np.float32)
                               for _ in range(3))
        seen = []

        def attention(q, k, v, start):
            seen.append((q.shape, k.shape, start))
            return np.ascontiguousarray(q * 0 + k[:, -q.shape[1]:]), np.zeros(q.shape[:2],
                                                                            np.float32)

        def invocation(index, rows, segments):
            tensors = [{"name": n, "role": "row_input", "dtype": "fp32",
                        "shape": [len(rows), heads, dim]} for n in ("q", "k", "v")]
            tensors += [{"name": "o", "role": "row_output", "dtype": "fp32",
                         "shape": [len(rows), heads, dim]},
                        {"name": "lse", "role": "row_output", "dtype": "fp32",
                         "shape": [len(rows), heads]}]
            arrays = [a[rows] for a in (q_all, k_all, v_all)]
            arrays += [np.full((len(rows), heads, dim), np.nan, np.float32),
                       np.full((len(rows), heads), np.nan, np.float32)]
            call = {"op": "attention", "pass": "forward", "invocation_index": index,
                    "segments": segments, "slot_rows": rows}
            calls.run(attention, call, list(zip(tensors, arrays)), ARRAYS)
            return arrays[3]

        invocation(0, [0, 1, 2], [[0, 0, 3, 0]])  # a prefill of three tokens
        o = invocation(1, [3], [[0, 0, 1, 3]])  # then one decode step at position 3
        self.assertEqual(seen, [((2, 3, 4), (2, 3, 4), 0), ((2, 1, 4), (2, 4, 4), 3)])
        np.testing.assert_array_equal(o[0], k_all[3])
        with self.assertRaisesRegex(ValueError, "the cache holds 4 tokens"):
            invocation(1, [4], [[0, 0, 1, 2]])


class FakeOpener:
    """Allocations as numpy byte buffers, counting opens and closes."""

    arrays = ARRAYS
    how = "fake"

    def __init__(self, buffers):
        self.buffers = buffers
        self.opened, self.closed = [], []

    def open(self, handle, size):
        self.opened.append(handle)
        return self.buffers[handle][:size]

    def close(self, entry):
        self.closed.append(len(entry))

    def view(self, entry, offset, dtype, shape):
        count = int(np.prod(shape))
        item = np.dtype(calls.NUMPY_DTYPES[dtype]).itemsize
        return entry[offset:offset + count * item].view(calls.NUMPY_DTYPES[dtype]).reshape(shape)


class IpcHandles(unittest.TestCase):
    def test_each_allocation_is_opened_once_and_closed_when_listed(self):
        handle = bytes(range(64))
        buffers = {handle: np.zeros(1024, np.uint8)}
        opener = FakeOpener(buffers)
        cache = cuda_ipc.HandleCache(opener)
        tensor = {"handle": base64.b64encode(handle).decode(), "allocation_bytes": 1024,
                  "offset": 256, "dtype": "fp32", "shape": [2, 3]}
        first = cache.view(tensor)
        first[:] = 5
        second = cache.view(dict(tensor, shape=[6]))
        self.assertEqual(opener.opened, [handle])
        np.testing.assert_array_equal(second, np.full(6, 5, np.float32))
        self.assertEqual(buffers[handle][256:260].view(np.float32)[0], 5)  # at the offset
        cache.close([handle, b"never opened"])
        self.assertEqual(opener.closed, [1024])
        cache.view(tensor)
        self.assertEqual(opener.opened, [handle, handle])

    def test_a_handle_that_is_not_base64_is_refused(self):
        with self.assertRaises(ValueError):
            cuda_ipc.decode_handle("not*base64")


class HostSharedMemoryDevice(unittest.TestCase):
    """The device path end to end through the worker's request handler, with allocations in POSIX
    shared memory standing in for cudaMalloc + CUDA IPC."""

    def setUp(self):
        self.names = []

    def tearDown(self):
        for name in self.names:
            os.unlink("/dev/shm/" + name)

    def allocation(self, size):
        name = f"bitcheck-test-{os.getpid()}-{len(self.names)}"
        with open("/dev/shm/" + name, "w+b") as file:
            file.truncate(size)
        self.names.append(name)
        with open("/dev/shm/" + name, "r+b") as file:
            return name, mmap.mmap(file.fileno(), size)

    def test_a_call_writes_the_outputs_into_the_allocation(self):
        name, memory = self.allocation(4096)
        handle = base64.b64encode(name.encode().ljust(64, b"\0")).decode()
        x = np.frombuffer(memory, np.float32, 2 * 4, 0).reshape(2, 4)
        w = np.frombuffer(memory, np.float32, 3 * 4, 256).reshape(3, 4)
        y = np.frombuffer(memory, np.float32, 2 * 3, 512).reshape(2, 3)
        x[:] = np.arange(8).reshape(2, 4)
        w[:] = 1
        y[:] = np.nan
        place = {"handle": handle, "allocation_bytes": 4096}
        request = {"type": "call", "function": "numpy_matmul:fixed_order", "op": "matmul",
                   "pass": "forward", "slot_rows": [0, 1], "segments": [], "invocation_index": 0,
                   "invocation_count": 1,
                   "device": {"kind": "host-shm", "index": 0, "close": []},
                   "tensors": [dict(place, name="x", role="row_input", dtype="fp32",
                                    shape=[2, 4], offset=0),
                               dict(place, name="w", role="parameter", dtype="fp32",
                                    shape=[3, 4], offset=256),
                               dict(place, name="y", role="row_output", dtype="fp32",
                                    shape=[2, 3], offset=512)]}
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                        "examples"))
        self.assertEqual(worker.handle(request), {"ok": True})
        np.testing.assert_array_equal(y, [[6, 6, 6], [22, 22, 22]])
        cache = cuda_ipc.cache_for(request["device"])
        self.assertIn(base64.b64decode(handle), cache.opened)
        worker.handle({"type": "close", "device": dict(request["device"], close=[handle])})
        self.assertNotIn(base64.b64decode(handle), cache.opened)

        bench = {"type": "bench", "function": "numpy_matmul:fixed_order", "op": "matmul",
                 "pass": "forward", "warmup": 1, "repeats": 3,
                 "device": {"kind": "host-shm", "index": 0, "close": []},
                 "sets": [request["tensors"]]}
        reply = worker.handle(bench)
        self.assertTrue(reply["ok"])
        self.assertEqual(reply["repeats"], 3)
        self.assertLessEqual(reply["min_ms"], reply["median_ms"])
        self.assertEqual(reply["timer"], "wall clock (host-shm)")
        self.assertNotIn(base64.b64decode(handle), cache.opened)  # opened for the bench only


if __name__ == "__main__":
    unittest.main()
