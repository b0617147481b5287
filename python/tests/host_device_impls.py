"""numpy impls declared on the cuda backend, for bitcheck's unit tests of the device path of
Python impls on the host stand-in of a device (allocations in POSIX shared memory, opened by the
worker as CUDA IPC handles would be): a fixed-order matmul, a control and one that raises."""
import numpy as np

import bitcheck_py


def _in_order(x, w, first, last):
    y = np.zeros((x.shape[0], w.shape[0]), dtype=np.float32)
    for k in range(first, last):
        y += x[:, k:k + 1] * w[:, k]
    return y


@bitcheck_py.impl(op="matmul", invariant=True, backend="cuda")
def fixed_order(x, w):
    return _in_order(x, w, 0, x.shape[1])


@bitcheck_py.impl(op="matmul", invariant=False, backend="cuda")
def split_k(x, w):
    k = x.shape[1]
    if x.shape[0] >= 4:
        return _in_order(x, w, 0, k)
    return _in_order(x, w, k // 2, k) + _in_order(x, w, 0, k // 2)


@bitcheck_py.impl(op="matmul", invariant=True, backend="cuda")
def raises(x, w):
    raise RuntimeError("this device impl raises on purpose")
