"""The GPU path of a call (not run yet: bitcheck's C++ side still sends CPU calls only, see
docs/plugins.md): each tensor arrives as a CUDA IPC memory handle of the buffer bitcheck allocated,
opened once per buffer with cupy and wrapped as a torch tensor through DLPack, so the user's function
reads and writes bitcheck's own device memory; nothing is copied. Timing uses CUDA events."""
import base64

_opened = {}

TORCH_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "i32": "int32"}


def open_tensor(tensor):
    import cupy
    import torch

    handle = base64.b64decode(tensor["ipc_handle"])
    if handle not in _opened:
        _opened[handle] = cupy.cuda.runtime.ipcOpenMemHandle(handle)
    pointer = _opened[handle] + tensor.get("offset", 0)
    dtype = getattr(torch, TORCH_DTYPES[tensor["dtype"]])
    element = torch.tensor([], dtype=dtype).element_size()
    count = 1
    for extent in tensor["shape"]:
        count *= extent
    memory = cupy.cuda.UnownedMemory(pointer, count * element, owner=None)
    # cupy has no bfloat16: the buffer is viewed as bytes and reinterpreted by torch.
    raw = cupy.ndarray((count * element,), dtype=cupy.uint8, memptr=cupy.cuda.MemoryPointer(memory, 0))
    return torch.from_dlpack(raw).view(dtype).reshape(tensor["shape"])


def timed(function, arguments, repeats=30, warmup=5):
    """Median milliseconds of function(*arguments), measured with CUDA events."""
    import torch

    for _ in range(warmup):
        function(*arguments)
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        function(*arguments)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]
