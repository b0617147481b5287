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
from bitcheck_py import calls, cuda_ipc, kernels  # noqa: E402

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

    def test_an_undecorated_function_observes_the_op_it_is_named_after_among_the_ops_sent(self):
        def rmsnorm(x, weight):
            return x

        declared = bitcheck_py.declaration(rmsnorm, ["matmul", "rmsnorm"])
        self.assertEqual(declared["op"], "rmsnorm")
        self.assertTrue(declared["library_default"])
        self.assertEqual((declared["dtypes"], declared["passes"]), (["fp32"], ["forward"]))
        with self.assertRaisesRegex(ValueError, r"its name is not an op \(matmul, silu\)"):
            bitcheck_py.declaration(rmsnorm, ["matmul", "silu"])

    def test_describe_reads_the_ops_from_the_request(self):
        # An op this package has never heard of: the worker knows the ops the request names.
        module = type(sys)("undecorated_ops")
        module.topk = lambda x: x
        module.topk.__name__ = "topk"
        sys.modules["undecorated_ops"] = module
        try:
            reply = worker.handle({"type": "describe", "function": "undecorated_ops:topk",
                                   "ops": ["matmul", "topk"]})
            self.assertEqual((reply["ok"], reply["op"]), (True, "topk"))
            with self.assertRaisesRegex(ValueError, r"not an op \(matmul\)"):
                worker.handle({"type": "describe", "function": "undecorated_ops:topk",
                               "ops": ["matmul"]})
        finally:
            sys.modules.pop("undecorated_ops")
            worker._functions.pop("undecorated_ops:topk", None)


class ImportErrors(unittest.TestCase):
    def test_an_import_error_names_the_interpreter_and_bitcheck_python(self):
        try:
            import bitcheck_no_such_module  # noqa: F401
        except ImportError as error:
            text = worker.error_text(error)
        self.assertIn("No module named 'bitcheck_no_such_module'", text)
        self.assertIn(f"bitcheck's Python worker ran {sys.executable} (Python ", text)
        self.assertIn("cannot import bitcheck_no_such_module: set BITCHECK_PYTHON", text)

    def test_other_errors_keep_their_traceback_alone(self):
        try:
            raise ValueError("not an import")
        except ValueError as error:
            text = worker.error_text(error)
        self.assertIn("ValueError: not an import", text)
        self.assertNotIn("BITCHECK_PYTHON", text)


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

    def matmul_call(self, **fields):
        """A 2 x 4 by 3 x 4 fp32 matmul call in one allocation: the request (with `fields`), its
        handle and the views x, w, y (x counts up, w is ones, y is NaN)."""
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
                                    shape=[2, 3], offset=512)], **fields}
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                        "examples"))
        return request, handle, y

    def test_a_call_writes_the_outputs_into_the_allocation(self):
        request, handle, y = self.matmul_call()
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
        self.assertNotIn("kernels", reply)  # not asked for: no profiler, no list

    def test_a_captured_call_without_cuda_graphs_is_a_capture_error_and_writes_nothing(self):
        request, handle, y = self.matmul_call(captured=True)
        with self.assertRaisesRegex(cuda_ipc.CaptureError,
                                    "the host-shm stand-in has no CUDA graphs"):
            worker.handle(request)
        self.assertTrue(np.isnan(y).all())
        worker.handle({"type": "close", "device": dict(request["device"], close=[handle])})


class KernelProvenance(unittest.TestCase):
    """What the worker sends back of a profiled call, from a trace as torch.profiler exports it."""

    TRACE = {"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1, "args": {}},
        {"ph": "X", "cat": "kernel", "name": "splitk_reduce", "ts": 30,
         "args": {"correlation": 12, "grid": [4, 1, 1], "block": [256, 1, 1], "shared memory": 0}},
        {"ph": "X", "cat": "Kernel", "name": "sm90_gemm_tile128x64", "ts": 20,
         "args": {"correlation": 11, "grid": [16, 2, 1], "block": [384, 1, 1],
                  "shared memory": 197632}},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD", "ts": 40, "args": {"correlation": 13}},
    ]}

    def test_kernels_are_listed_in_launch_order_with_their_launch_configuration(self):
        launches = kernels.launches_of_trace(self.TRACE)
        self.assertEqual([k["name"] for k in launches], ["sm90_gemm_tile128x64", "splitk_reduce"])
        self.assertEqual(launches[0], {"name": "sm90_gemm_tile128x64", "grid": [16, 2, 1],
                                       "block": [384, 1, 1], "shared_bytes": 197632})

    def test_a_call_not_asked_for_kernels_runs_without_the_profiler(self):
        reply = {}
        with kernels.recorded(False, reply):
            pass
        self.assertEqual(reply, {})


if __name__ == "__main__":
    unittest.main()


try:
    import torch
except ImportError:
    torch = None


@unittest.skipIf(torch is None, "no torch in this python3")
class TorchConventions(unittest.TestCase):
    """The GPU path's mapping with torch tensors on the CPU device (no IPC): views of one byte
    tensor, native bf16, index tensors for scattered slots, results checked for dtype and device."""

    def setUp(self):
        self.arrays = cuda_ipc.TorchArrays(torch, torch.device("cpu"))

    def test_tensors_are_views_of_the_allocation_at_their_offset(self):
        base = torch.zeros(1024, dtype=torch.uint8)
        x = cuda_ipc.tensor_view(torch, base, 256, torch.float32, [2, 3])
        x.fill_(1.5)
        self.assertEqual(base[256:260].view(torch.float32).item(), 1.5)
        self.assertEqual(int(base[280:].count_nonzero()), 0)
        h = cuda_ipc.tensor_view(torch, base, 512, torch.bfloat16, [4])
        self.assertEqual(h.shape, (4,))
        self.assertEqual(h.dtype, torch.bfloat16)

    def test_scattered_slots_are_gathered_and_pads_stay_poisoned(self):
        call, views = matmul_call([2, -1, 0, 3, -1])
        views = [(t, torch.from_numpy(a)) for t, a in views]
        calls.run(lambda x, w: x @ w.T, call, views, self.arrays)
        x, w, y = (array for _, array in views)
        for slot in (0, 2, 3):
            torch.testing.assert_close(y[slot], x[slot] @ w.T, rtol=0, atol=0)
        self.assertTrue(torch.isnan(y[[1, 4]]).all())

    def test_bf16_is_native_and_a_float32_result_is_refused(self):
        call, views = matmul_call([0, 1, 2], dtype="bf16")
        views = [(t, torch.from_numpy(a).to(torch.bfloat16)) for t, a in views]
        with self.assertRaisesRegex(calls.ResultError, r"matmul output y: expected shape \(3, 5\) "
                                    r"bfloat16, got shape \(3, 5\) float32"):
            calls.run(lambda x, w: (x @ w.T).float(), call, views, self.arrays)
        calls.run(lambda x, w: x @ w.T, call, views, self.arrays)
        x, w, y = (array for _, array in views)
        self.assertTrue(torch.equal(y, x @ w.T))

    def test_a_result_that_is_not_a_tensor_on_the_device_is_refused(self):
        call, views = matmul_call([0, 1])
        views = [(t, torch.from_numpy(a)) for t, a in views]
        with self.assertRaisesRegex(calls.ResultError,
                                    "expected a torch tensor on cpu, got a numpy.ndarray"):
            calls.run(lambda x, w: (x @ w.T).numpy(), call, views, self.arrays)

    def test_attention_keeps_its_cache_as_tensors(self):
        heads, dim = 2, 4
        q_all, k_all, v_all = (torch.randn(5, heads, dim) for _ in range(3))
        seen = []

        def attention(q, k, v, start):
            seen.append((tuple(q.shape), tuple(k.shape), start))
            return k[:, -q.shape[1]:].clone(), torch.zeros(q.shape[:2])

        def invocation(index, rows, segments):
            tensors = [{"name": n, "role": "row_input", "dtype": "fp32",
                        "shape": [len(rows), heads, dim]} for n in ("q", "k", "v")]
            tensors += [{"name": "o", "role": "row_output", "dtype": "fp32",
                         "shape": [len(rows), heads, dim]},
                        {"name": "lse", "role": "row_output", "dtype": "fp32",
                         "shape": [len(rows), heads]}]
            arrays = [a[rows] for a in (q_all, k_all, v_all)]
            arrays += [torch.full((len(rows), heads, dim), float("nan")),
                       torch.full((len(rows), heads), float("nan"))]
            call = {"op": "attention", "pass": "forward", "invocation_index": index,
                    "segments": segments, "slot_rows": rows}
            calls.run(attention, call, list(zip(tensors, arrays)), self.arrays)
            return arrays[3], arrays[4]

        invocation(0, [0, 1, 2], [[0, 0, 3, 0]])
        o, lse = invocation(1, [3], [[0, 0, 1, 3]])
        self.assertEqual(seen, [((2, 3, 4), (2, 3, 4), 0), ((2, 1, 4), (2, 4, 4), 3)])
        self.assertTrue(torch.equal(o[0], k_all[3]))
        self.assertTrue(torch.equal(lse, torch.zeros(1, heads)))


def _reference_sdpa(q, k, v, attn_mask=None, is_causal=False, enable_gqa=False):
    """F.scaled_dot_product_attention's documented semantics (is_causal: the top-left aligned
    lower triangle; a bool mask: True attends; enable_gqa: q head h reads kv head h // group),
    for torch versions that lack it."""
    if enable_gqa:
        group = q.shape[-3] // k.shape[-3]
        k, v = k.repeat_interleave(group, dim=-3), v.repeat_interleave(group, dim=-3)
    scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    length, total = q.shape[-2], k.shape[-2]
    if is_causal:
        attn_mask = torch.ones(length, total, dtype=torch.bool).tril()
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


@unittest.skipIf(torch is None, "no torch in this python3")
class TorchDefaultsAttention(unittest.TestCase):
    """torch_defaults.sdpa against causal attention over the whole sequence, for a prefill, a
    later chunk and a decode step (through SDPA's documented semantics where this torch lacks it)."""

    def test_prefill_chunk_and_decode_rows_are_causal_attention(self):
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                        "examples"))
        import torch_defaults
        functional = torch_defaults.F
        original = getattr(functional, "scaled_dot_product_attention", None)
        functional.scaled_dot_product_attention = _reference_sdpa
        try:
            heads, kv_heads, dim, tokens = 4, 2, 8, 6
            generator = torch.Generator().manual_seed(1)
            q = torch.randn(heads, tokens, dim, generator=generator, dtype=torch.float64)
            k = torch.randn(kv_heads, tokens, dim, generator=generator, dtype=torch.float64)
            v = torch.randn(kv_heads, tokens, dim, generator=generator, dtype=torch.float64)
            expected = _reference_sdpa(q, k, v, is_causal=True, enable_gqa=True)
            for start, length in ((0, 6), (0, 3), (3, 2), (5, 1)):
                o, lse = torch_defaults.sdpa(q[:, start:start + length], k[:, :start + length],
                                             v[:, :start + length], start)
                torch.testing.assert_close(o, expected[:, start:start + length])
                scores = (q @ k.repeat_interleave(2, dim=0).transpose(-1, -2)) / dim ** 0.5
                scores = scores.masked_fill(~torch.ones(tokens, tokens, dtype=torch.bool).tril(),
                                            float("-inf"))
                torch.testing.assert_close(lse, torch.logsumexp(scores, -1)[:, start:start + length]
                                           .float())
        finally:
            if original is None:
                del functional.scaled_dot_product_attention
            else:
                functional.scaled_dot_product_attention = original


@unittest.skipIf(torch is None, "no torch in this python3")
class TorchDefaultsSignatures(unittest.TestCase):
    """torch_defaults' functions take bitcheck's arguments (weight (1, H), ids and targets as
    int32 (rows,)) and return its outputs, on CPU tensors."""

    def setUp(self):
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                        "examples"))
        import torch_defaults
        self.defaults = torch_defaults
        self.generator = torch.Generator().manual_seed(2)

    def random(self, *shape):
        return torch.randn(*shape, generator=self.generator)

    def test_linear_rmsnorm_and_logprob(self):
        x, w = self.random(3, 8), self.random(5, 8)
        torch.testing.assert_close(self.defaults.linear(x, w), x @ w.T)
        weight = self.random(1, 8)
        expected = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * weight
        torch.testing.assert_close(self.defaults.rms_norm_mean(x, weight), expected)
        logits, target = self.random(3, 11), torch.tensor([0, 10, 4], dtype=torch.int32)
        logprob = self.defaults.logprob(logits, target)
        self.assertEqual(logprob.shape, (3,))
        torch.testing.assert_close(logprob, torch.log_softmax(logits, -1)[[0, 1, 2], [0, 10, 4]])

    def test_embedding_forward_and_its_gradient(self):
        table, ids = self.random(6, 4), torch.tensor([1, 5, 1], dtype=torch.int32)
        torch.testing.assert_close(self.defaults.embedding(ids, table), table[[1, 5, 1]])
        dout = self.random(3, 4)
        grad = self.defaults.embedding(ids, table.to(torch.bfloat16), dout.to(torch.bfloat16))
        self.assertEqual(grad.dtype, torch.float32)
        expected = torch.zeros(6, 4)
        expected.index_add_(0, ids.long(), dout.to(torch.bfloat16).float())
        torch.testing.assert_close(grad, expected)
