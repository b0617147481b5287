"""Maps one bitcheck call (every slot of a physical batch, pad slots marked -1) onto the usual
PyTorch conventions and back: the user's function sees only the real rows, in slot order, as
(rows, *row_shape) arrays, parameters whole, and returns its outputs in the op's declared order.

CPU: the tensors live in one POSIX shared-memory buffer that bitcheck filled; they are numpy views
of it, and results are written back into it. bf16 has no numpy type: bf16 tensors are handed over
as float32 and results are rounded to bf16 (to nearest even) on the way back."""
import mmap

import numpy as np

_buffer = {"name": None, "size": 0, "map": None}

NUMPY_DTYPES = {"fp32": np.float32, "fp16": np.float16, "i32": np.int32, "bf16": np.uint16}


def shared_buffer(name, size):
    if _buffer["name"] != name or _buffer["size"] != size:
        if _buffer["map"] is not None:
            _buffer["map"].close()
        with open("/dev/shm/" + name.lstrip("/"), "r+b") as file:
            _buffer["map"] = mmap.mmap(file.fileno(), size)
        _buffer["name"], _buffer["size"] = name, size
    return _buffer["map"]


def bf16_to_float32(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def float32_to_bf16(values):
    values = np.ascontiguousarray(values, dtype=np.float32)
    bits = values.view(np.uint32)
    rounded = ((bits + (((bits >> 16) & 1) + 0x7FFF)) >> 16).astype(np.uint16)
    return np.where(np.isnan(values), np.uint16(0x7FC0), rounded)


def visible(array, dtype):
    """The array the user's function sees for a tensor of bitcheck dtype `dtype`."""
    return bf16_to_float32(array) if dtype == "bf16" else array


def expected_dtype(dtype):
    return np.float32 if dtype == "bf16" else NUMPY_DTYPES[dtype]


def describe(shape, dtype):
    return f"shape {tuple(shape)} {np.dtype(dtype).name}"


class ResultError(ValueError):
    """A result of the wrong shape or dtype: reported by its message alone."""


def check_result(op, name, result, shape, dtype):
    result = np.asarray(result) if not hasattr(result, "shape") else result
    if hasattr(result, "detach"):  # a torch tensor on the CPU
        result = result.detach().cpu().numpy()
    squeezed = tuple(shape[:-1]) if len(shape) > 1 and shape[-1] == 1 else None
    if tuple(result.shape) != tuple(shape) and tuple(result.shape) != squeezed:
        raise ResultError(f"{op} output {name}: expected {describe(shape, dtype)}, "
                         f"got {describe(result.shape, result.dtype)}")
    if result.dtype != np.dtype(dtype):
        raise ResultError(f"{op} output {name}: expected {describe(shape, dtype)}, "
                         f"got {describe(result.shape, result.dtype)}")
    return result.reshape(shape)


def run(function, call):
    buffer = shared_buffer(call["shm"], call["shm_bytes"])
    slot_rows = np.asarray(call["slot_rows"], dtype=np.int64)
    real = np.nonzero(slot_rows >= 0)[0]
    arguments, outputs = [], []
    for tensor in call["tensors"]:
        dtype = tensor["dtype"]
        shape = tuple(tensor["shape"])
        count = int(np.prod(shape)) if shape else 1
        array = np.frombuffer(buffer, dtype=NUMPY_DTYPES[dtype], count=count,
                              offset=tensor["offset"]).reshape(shape)
        role = tensor["role"]
        if role in ("row_output", "reduction_output"):
            outputs.append((tensor, array))
            continue
        if role == "row_input":
            array = array[real]
            if array.ndim == 2 and array.shape[1] == 1:
                array = array[:, 0]  # ids and targets: one value per token, as in PyTorch
        arguments.append(visible(array, dtype))
    if call["op"] == "attention":
        run_attention(function, call, arguments, outputs)
        return
    results = function(*arguments)
    if not isinstance(results, (tuple, list)):
        results = (results,)
    if len(results) != len(outputs):
        names = ", ".join(t["name"] for t, _ in outputs)
        raise ResultError(f"{call['op']}: expected {len(outputs)} outputs ({names}), "
                         f"got {len(results)}")
    for (tensor, array), result in zip(outputs, results):
        dtype = tensor["dtype"]
        if tensor["role"] == "row_output":
            shape = (len(real),) + tuple(tensor["shape"][1:])
            result = check_result(call["op"], tensor["name"], result, shape, expected_dtype(dtype))
            array[real] = float32_to_bf16(result) if dtype == "bf16" else result
        else:  # a contribution over this call's tokens, added to the fp32 accumulator
            result = check_result(call["op"], tensor["name"], result, array.shape, np.float32)
            array += result


_kv_cache = {}  # sequence -> (keys, values) of the layout execution in progress


def run_attention(function, call, arguments, outputs):
    """Attention over the call's segments: function(q, k, v, start_position) with q (H, L, D) for
    the segment's L new tokens and k, v (KVH, start_position + L, D) for every token of the
    sequence so far (kept here across the invocations of one layout, as a KV cache); returns o
    (H, L, D), or (o, lse) with lse (H, L). Without lse, lse is written as 0 in every layout."""
    if call["pass"] != "forward":
        raise NotImplementedError("Python attention impls run the forward pass only")
    if call["invocation_index"] == 0:
        _kv_cache.clear()
    (o_tensor, o_array), (lse_tensor, lse_array) = outputs
    q_all, k_all, v_all = (np.asarray(call_tensor(call, name)) for name in ("q", "k", "v"))
    for sequence, first, length, start in call["segments"]:
        keys, values = _kv_cache.get(sequence, (k_all[:0], v_all[:0]))
        if len(keys) != start:
            raise ValueError(f"attention: the cache holds {len(keys)} tokens of sequence "
                             f"{sequence}, the call starts at position {start}")
        keys = np.concatenate([keys, k_all[first:first + length]])
        values = np.concatenate([values, v_all[first:first + length]])
        _kv_cache[sequence] = (keys, values)
        q = q_all[first:first + length].transpose(1, 0, 2)
        result = function(q, keys.transpose(1, 0, 2), values.transpose(1, 0, 2), start)
        o, lse = result if isinstance(result, (tuple, list)) else (result, None)
        o = check_result("attention", "o", o, q.shape, expected_dtype(o_tensor["dtype"]))
        o = o.transpose(1, 0, 2)
        o_array[first:first + length] = float32_to_bf16(o) if o_tensor["dtype"] == "bf16" else o
        if lse is None:
            lse_array[first:first + length] = 0
        else:
            lse = check_result("attention", "lse", lse, q.shape[:2], np.float32)
            lse_array[first:first + length] = lse.T


def call_tensor(call, name):
    """Every slot of input `name` (pads included: segments index slots), as the function sees it."""
    buffer = shared_buffer(call["shm"], call["shm_bytes"])
    for tensor in call["tensors"]:
        if tensor["name"] == name:
            shape = tuple(tensor["shape"])
            array = np.frombuffer(buffer, dtype=NUMPY_DTYPES[tensor["dtype"]],
                                  count=int(np.prod(shape)), offset=tensor["offset"]).reshape(shape)
            return visible(array, tensor["dtype"])
    raise ValueError(f"attention: the call has no tensor {name}")
