"""Maps one bitcheck call (every slot of a physical batch, pad slots marked -1) onto the usual
PyTorch conventions and back: the user's function sees only the real rows, in slot order, as
(rows, *row_shape) arrays, parameters whole, and returns its outputs in the op's declared order.

The arrays are numpy views of shared memory on the CPU (NumpyArrays below) and torch tensors over
bitcheck's device allocations on the GPU (cuda_ipc.TorchArrays); this module uses only the
operations the two share, through those classes."""
try:
    import numpy as np
except ImportError:  # the GPU path needs torch only; the CPU path says what is missing
    np = None

NUMPY_DTYPES = ({"fp32": np.float32, "fp16": np.float16, "i32": np.int32, "bf16": np.uint16}
                if np is not None else {})


class ResultError(ValueError):
    """A result of the wrong shape, dtype or device: reported by its message alone."""


def bf16_to_float32(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def float32_to_bf16(values):
    values = np.ascontiguousarray(values, dtype=np.float32)
    bits = values.view(np.uint32)
    rounded = ((bits + (((bits >> 16) & 1) + 0x7FFF)) >> 16).astype(np.uint16)
    return np.where(np.isnan(values), np.uint16(0x7FC0), rounded)


class NumpyArrays:
    """The CPU conventions: numpy arrays; bf16 has no numpy type, so bf16 tensors are handed over
    as float32 and results are rounded to bf16 (nearest even) on the way back."""

    def __init__(self):
        if np is None:
            raise ImportError("Python impls on the CPU backend need numpy in the worker's python3 "
                              "(BITCHECK_PYTHON)", name="numpy")

    def visible(self, array, dtype):
        return bf16_to_float32(array) if dtype == "bf16" else array

    def result_dtype(self, dtype):
        return np.dtype(np.float32 if dtype == "bf16" else NUMPY_DTYPES[dtype])

    def describe(self, shape, dtype):
        return f"shape {tuple(shape)} {np.dtype(dtype).name}"

    def as_result(self, result):
        if hasattr(result, "detach"):  # a torch tensor on the CPU
            result = result.detach().cpu().numpy()
        return np.asarray(result)

    def index(self, rows, like):
        return rows if isinstance(rows, slice) else np.asarray(rows, dtype=np.int64)

    def take(self, array, index):
        return array[index]

    def store(self, array, index, result, dtype):
        array[index] = float32_to_bf16(result) if dtype == "bf16" else result

    def accumulate(self, array, result):
        array += result

    def concat(self, parts):
        return np.concatenate(parts)

    def swap01(self, array):
        return np.swapaxes(array, 0, 1)

    def synchronize(self):
        pass


def real_rows(slot_rows):
    """The real (non-pad) slots: slice(None) when every slot is real, a slice when they are one
    run, else their list; and how many there are. Slices keep the arguments views (no copy)."""
    real = [slot for slot, row in enumerate(slot_rows) if row >= 0]
    if len(real) == len(slot_rows):
        return slice(None), len(real)
    if real and real[-1] - real[0] + 1 == len(real):
        return slice(real[0], real[-1] + 1), len(real)
    return real, len(real)


def check_result(arrays, op, name, result, shape, dtype):
    result = arrays.as_result(result)
    shape = tuple(shape)
    squeezed = shape[:-1] if len(shape) > 1 and shape[-1] == 1 else None
    if tuple(result.shape) not in (shape, squeezed) or result.dtype != dtype:
        raise ResultError(f"{op} output {name}: expected {arrays.describe(shape, dtype)}, "
                          f"got {arrays.describe(result.shape, result.dtype)}")
    return result.reshape(shape)


def split(views, slot_rows, arrays):
    """The function's arguments (row inputs at the real slots, one-value rows such as ids as
    (rows,), parameters whole), the outputs [(tensor, array)], the real slots' index and count."""
    rows, count = real_rows(slot_rows)
    index = None
    arguments, outputs = [], []
    for tensor, array in views:
        role = tensor["role"]
        if role in ("row_output", "reduction_output"):
            outputs.append((tensor, array))
            continue
        if role == "row_input":
            if index is None:
                index = arrays.index(rows, array)
            array = arrays.take(array, index)
            if array.ndim == 2 and array.shape[1] == 1:
                array = array[:, 0]  # ids and targets: one value per token, as in PyTorch
        arguments.append(arrays.visible(array, tensor["dtype"]))
    if index is None:
        index = arrays.index(rows, outputs[0][1] if outputs else None)
    return arguments, outputs, index, count


def run(function, call, views, arrays):
    """Runs `function` on one call. views: [(tensor description, array)] in the op's declared
    order, over bitcheck's buffers; outputs are written there."""
    if call["op"] == "attention":
        run_attention(function, call, views, arrays)
        return
    arguments, outputs, index, count = split(views, call["slot_rows"], arrays)
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
            shape = (count,) + tuple(tensor["shape"][1:])
            result = check_result(arrays, call["op"], tensor["name"], result, shape,
                                  arrays.result_dtype(dtype))
            arrays.store(array, index, result, dtype)
        else:  # a contribution over this call's tokens, added to the fp32 accumulator
            result = check_result(arrays, call["op"], tensor["name"], result, array.shape,
                                  arrays.result_dtype("fp32"))
            arrays.accumulate(array, result)


_kv_cache = {}  # sequence -> (keys, values) of the layout execution in progress


def run_attention(function, call, views, arrays):
    """Attention over the call's segments: function(q, k, v, start_position) with q (H, L, D) for
    the segment's L new tokens and k, v (KVH, start_position + L, D) for every token of the
    sequence so far (kept here across the invocations of one layout, as a KV cache); returns o
    (H, L, D), or (o, lse) with lse (H, L) in fp32. Without lse, lse is written as 0 (the accuracy
    check then fails it)."""
    if call["pass"] != "forward":
        raise NotImplementedError("Python attention impls run the forward pass only")
    if call["invocation_index"] == 0:
        _kv_cache.clear()
    by_name = {tensor["name"]: (tensor, array) for tensor, array in views}
    q_all, k_all, v_all = (arrays.visible(by_name[name][1], by_name[name][0]["dtype"])
                           for name in ("q", "k", "v"))
    o_tensor, o_array = by_name["o"]
    _, lse_array = by_name["lse"]
    for sequence, first, length, start in call["segments"]:
        rows = slice(first, first + length)
        keys, values = _kv_cache.get(sequence, (k_all[:0], v_all[:0]))
        if len(keys) != start:
            raise ValueError(f"attention: the cache holds {len(keys)} tokens of sequence "
                             f"{sequence}, the call starts at position {start}")
        keys = arrays.concat([keys, k_all[rows]])
        values = arrays.concat([values, v_all[rows]])
        _kv_cache[sequence] = (keys, values)
        q = arrays.swap01(q_all[rows])
        result = function(q, arrays.swap01(keys), arrays.swap01(values), start)
        o, lse = result if isinstance(result, (tuple, list)) else (result, None)
        o = check_result(arrays, "attention", "o", o, q.shape,
                         arrays.result_dtype(o_tensor["dtype"]))
        arrays.store(o_array, rows, arrays.swap01(o), o_tensor["dtype"])
        if lse is None:
            lse_array[rows] = 0
        else:
            lse = check_result(arrays, "attention", "lse", lse, q.shape[:2],
                               arrays.result_dtype("fp32"))
            arrays.store(lse_array, rows, arrays.swap01(lse), "fp32")
