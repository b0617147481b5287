"""numpy matmul impls for the CPU (the CI path of --py-impl): a fixed-order matmul that claims
invariance, a control whose K split depends on the batch, and numpy's own product, undeclared.

    bitcheck sweep --py-impl numpy_matmul:fixed_order --op matmul --dtype fp32 --pass forward --backend cpu
"""
import numpy as np

import bitcheck_py


def _dot_in_order(x, w, first, last):
    # One fp32 multiply-add per k, in index order, for every output element at once: an element's
    # sum never depends on which other rows are in the batch.
    y = np.zeros((x.shape[0], w.shape[0]), dtype=np.float32)
    for k in range(first, last):
        y += x[:, k:k + 1] * w[:, k]
    return y


@bitcheck_py.impl(op="matmul", invariant=True, dtypes=("fp32", "bf16"),
                  description="K summed in index order per output element (numpy)")
def fixed_order(x, w):
    return _dot_in_order(x, w, 0, x.shape[1])


@bitcheck_py.impl(op="matmul", invariant=False, dtypes=("fp32", "bf16"),
                  description="control: below 4 rows, K split into 4 partial sums (numpy)")
def split_k_by_batch(x, w):
    k = x.shape[1]
    if x.shape[0] >= 4:
        return _dot_in_order(x, w, 0, k)
    part = (k + 3) // 4
    partials = [_dot_in_order(x, w, first, min(k, first + part)) for first in range(0, k, part)]
    return (partials[3] + partials[2]) + (partials[1] + partials[0])


def matmul(x, w):
    # No declaration: named after an op, it is an fp32 forward observation of that op.
    return x @ w.T
