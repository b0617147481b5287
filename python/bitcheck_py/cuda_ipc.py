"""The GPU path of a call: each tensor arrives as the CUDA IPC handle of the cudaMalloc allocation
bitcheck placed it in (base64) plus its offset from the allocation's base. An allocation is opened
once (cudaIpcOpenMemHandle, through cupy, or through the CUDA driver with ctypes when cupy is
missing) and kept open across calls, since opening costs far more than a call, until a request
lists it under device.close (bitcheck is about to free it). Its bytes are wrapped as one torch
tensor without a copy (DLPack from cupy, or __cuda_array_interface__), and each tensor of a call
is a view of it: the function reads bitcheck's inputs and its results are copied, on the device,
into bitcheck's output buffers. The worker synchronizes the device before it replies; bitcheck has
synchronized before it sent the request.

Benchmarks time the function with CUDA events (warm-up, then one event pair per call).

A call of the graph layout ("captured") is captured with torch.cuda.graph and the graph replayed
once; the eager layouts ran before it in the same worker, so the function is warmed up. A function
that cannot be captured (it synchronizes, copies to the host) fails with CaptureError, and
bitcheck skips the layout with its text.

The "host-shm" kind is the host stand-in of bitcheck's CPU tests: the handle names a POSIX
shared-memory object, the views are numpy arrays (CPU conventions), and time is wall time."""
import base64
import mmap
import os
import time

from . import calls
from . import shm

TORCH_DTYPE_NAMES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "i32": "int32"}


def decode_handle(text):
    return base64.b64decode(text.encode("ascii"), validate=True)


class HandleCache:
    """Allocations opened through IPC, by handle, until closed."""

    def __init__(self, opener):
        self.opener = opener
        self.opened = {}  # handle bytes -> what opener.open returned

    def close(self, handles):
        for handle in handles:
            entry = self.opened.pop(handle, None)
            if entry is not None:
                self.opener.close(entry)

    def close_all(self):
        self.close(list(self.opened))

    def view(self, tensor):
        handle = decode_handle(tensor["handle"])
        if handle not in self.opened:
            self.opened[handle] = self.opener.open(handle, tensor["allocation_bytes"])
        return self.opener.view(self.opened[handle], tensor["offset"], tensor["dtype"],
                                tensor["shape"])

    def views(self, tensors):
        return [(tensor, self.view(tensor)) for tensor in tensors]


class TorchArrays:
    """The GPU conventions: torch tensors on the device, in their own dtype (bf16 included);
    results must be torch tensors on the same device."""

    def __init__(self, torch, device):
        self.torch = torch
        self.device = device

    def dtype(self, name):
        return getattr(self.torch, TORCH_DTYPE_NAMES[name])

    def visible(self, array, dtype):
        return array

    def result_dtype(self, dtype):
        return self.dtype(dtype)

    def describe(self, shape, dtype):
        return f"shape {tuple(shape)} {str(dtype).replace('torch.', '')}"

    def as_result(self, result):
        if not isinstance(result, self.torch.Tensor) or result.device != self.device:
            where = f"a tensor on {result.device}" if isinstance(result, self.torch.Tensor) \
                else f"a {type(result).__module__}.{type(result).__name__}"
            raise calls.ResultError(f"expected a torch tensor on {self.device}, got {where}")
        return result

    def index(self, rows, like):
        if isinstance(rows, slice):
            return rows
        return self.torch.tensor(rows, dtype=self.torch.long, device=self.device)

    def take(self, array, index):
        return array[index]

    def store(self, array, index, result, dtype):
        array[index] = result

    def accumulate(self, array, result):
        array += result

    def concat(self, parts):
        return self.torch.cat(parts)

    def swap01(self, array):
        return array.transpose(0, 1)

    def synchronize(self):
        self.torch.cuda.synchronize(self.device)

    def time_calls(self, run, warmup, repeats):
        for i in range(warmup):
            run(i)
        self.synchronize()
        times = []
        for i in range(repeats):
            start = self.torch.cuda.Event(enable_timing=True)
            end = self.torch.cuda.Event(enable_timing=True)
            start.record()
            run(warmup + i)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        return sorted(times), "cuda events"


def tensor_view(torch, base, offset, dtype, shape):
    """The tensor of `shape` and torch `dtype` at byte `offset` of `base`, a uint8 tensor over a
    whole allocation: a view, no copy (offsets are 256-byte aligned, as bitcheck places them)."""
    count = 1
    for extent in shape:
        count *= extent
    size = count * torch.empty((), dtype=dtype).element_size()
    return base[offset:offset + size].view(dtype).reshape(tuple(shape))


class _CudaArrayInterface:
    """Raw device bytes for torch.as_tensor (no copy)."""

    def __init__(self, pointer, size):
        self.__cuda_array_interface__ = {"shape": (size,), "typestr": "|u1",
                                         "data": (pointer, False), "version": 3,
                                         "strides": None, "stream": None}


class CudaOpener:
    """Opens CUDA IPC handles in this process and wraps each allocation as a uint8 torch tensor.
    cupy (DLPack) when it imports and BITCHECK_PY_IPC is not "driver"; else the driver API."""

    def __init__(self, device_index):
        import torch

        self.torch = torch
        self.device = torch.device("cuda", device_index)
        torch.cuda.set_device(self.device)
        torch.empty(1, device=self.device)  # the primary context, current on this thread
        self.arrays = TorchArrays(torch, self.device)
        self.cupy = None
        if os.environ.get("BITCHECK_PY_IPC", "") != "driver":
            try:
                import cupy
                self.cupy = cupy
            except ImportError:
                self.cupy = None
        if self.cupy is None:
            self._load_driver()

    def _load_driver(self):
        import ctypes

        class IpcHandle(ctypes.Structure):
            _fields_ = [("reserved", ctypes.c_char * 64)]

        driver = ctypes.CDLL("libcuda.so.1")
        self._handle_type = IpcHandle
        self._open = getattr(driver, "cuIpcOpenMemHandle_v2", None) or driver.cuIpcOpenMemHandle
        self._open.argtypes = [ctypes.POINTER(ctypes.c_uint64), IpcHandle, ctypes.c_uint]
        self._open.restype = ctypes.c_int
        self._close = driver.cuIpcCloseMemHandle
        self._close.argtypes = [ctypes.c_uint64]
        self._close.restype = ctypes.c_int
        self._ctypes = ctypes

    @property
    def how(self):
        return "cupy" if self.cupy is not None else "driver"

    def time_calls(self, run, warmup, repeats):
        return self.arrays.time_calls(run, warmup, repeats)

    def open(self, handle, size):
        if self.cupy is not None:
            cupy = self.cupy
            with cupy.cuda.Device(self.device.index):
                pointer = cupy.cuda.runtime.ipcOpenMemHandle(handle)
                memory = cupy.cuda.UnownedMemory(pointer, size, None, self.device.index)
                raw = cupy.ndarray((size,), dtype=cupy.uint8,
                                   memptr=cupy.cuda.MemoryPointer(memory, 0))
            return pointer, self.torch.from_dlpack(raw)
        pointer = self._ctypes.c_uint64()
        status = self._open(self._ctypes.byref(pointer), self._handle_type.from_buffer_copy(handle),
                            1)  # CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS
        if status != 0:
            raise RuntimeError(f"cuIpcOpenMemHandle failed: CUresult {status}")
        base = self.torch.as_tensor(_CudaArrayInterface(pointer.value, size), device=self.device)
        return pointer.value, base

    def close(self, entry):
        pointer, _ = entry
        if self.cupy is not None:
            with self.cupy.cuda.Device(self.device.index):
                self.cupy.cuda.runtime.ipcCloseMemHandle(pointer)
        else:
            self._close(pointer)

    def view(self, entry, offset, dtype, shape):
        return tensor_view(self.torch, entry[1], offset, self.arrays.dtype(dtype), shape)


class ShmOpener:
    """The host stand-in of bitcheck's CPU tests: a handle names a POSIX shared-memory object."""

    how = "host-shm"

    def __init__(self):
        self.arrays = calls.NumpyArrays()

    def open(self, handle, size):
        name = handle.rstrip(b"\0").decode("ascii")
        with open("/dev/shm/" + name.lstrip("/"), "r+b") as file:
            return mmap.mmap(file.fileno(), size)

    def close(self, entry):
        try:
            entry.close()
        except BufferError:
            pass  # a view still alive (the function kept one): unmapped with the last view

    def view(self, entry, offset, dtype, shape):
        return shm.view(entry, offset, dtype, shape)

    def time_calls(self, run, warmup, repeats):
        for i in range(warmup):
            run(i)
        times = []
        for i in range(repeats):
            start = time.perf_counter()
            run(warmup + i)
            times.append((time.perf_counter() - start) * 1e3)
        return sorted(times), "wall clock"


_caches = {}  # (kind, device index) -> HandleCache, for the worker's lifetime


def cache_for(device):
    key = (device["kind"], device.get("index", 0))
    if key not in _caches:
        if device["kind"] == "cuda":
            opener = CudaOpener(key[1])
        elif device["kind"] == "host-shm":
            opener = ShmOpener()
        else:
            raise ValueError(f"unknown device kind {device['kind']!r}")
        _caches[key] = HandleCache(opener)
    return _caches[key]


def close(device):
    """Closes what bitcheck is about to free (request["device"]["close"])."""
    cache = cache_for(device)
    cache.close([decode_handle(text) for text in device.get("close", [])])
    return cache


class CaptureError(Exception):
    """The call could not be captured into a CUDA graph; its cause says why."""


_graphs = []  # the graph layout's graphs so far: tensors they allocated (a KV cache) stay theirs


def run_captured(body, opener, invocation_index):
    """body() captured into a CUDA graph by torch.cuda.graph, then the graph replayed once."""
    torch = getattr(opener, "torch", None)
    if torch is None:
        raise CaptureError(f"the {opener.how} stand-in has no CUDA graphs")
    if invocation_index == 0:
        _graphs.clear()
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            body()
    except Exception as error:
        raise CaptureError(f"{type(error).__name__}: {error}") from error
    graph.replay()
    _graphs.append(graph)


def run_call(function, call):
    cache = close(call["device"])
    arrays = cache.opener.arrays
    try:
        views = cache.views(call["tensors"])
        if call.get("captured"):
            run_captured(lambda: calls.run(function, call, views, arrays), cache.opener,
                         call["invocation_index"])
        else:
            calls.run(function, call, views, arrays)
    finally:
        arrays.synchronize()  # bitcheck reads the outputs once the reply is in


def bench(function, request):
    """Times function on each set of tensors in turn; the sets' allocations are opened for this
    request only. Returns median and minimum milliseconds."""
    cache = close(request["device"])
    opener = cache.opener
    arrays = opener.arrays
    once = HandleCache(opener)
    argument_sets = []
    try:
        for tensors in request["sets"]:
            rows = next(t["shape"][0] for t in tensors if t["role"] == "row_input")
            arguments, _, _, _ = calls.split(once.views(tensors), list(range(rows)), arrays)
            argument_sets.append(arguments)
        times, timer = opener.time_calls(
            lambda i: function(*argument_sets[i % len(argument_sets)]), request["warmup"],
            max(1, request["repeats"]))
        arrays.synchronize()
    finally:
        argument_sets.clear()
        once.close_all()
    return {"ok": True, "median_ms": times[len(times) // 2], "min_ms": times[0],
            "repeats": len(times), "timer": timer + " (" + opener.how + ")"}
