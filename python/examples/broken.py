"""Python impls that fail on purpose, one per failure mode bitcheck must turn into a case `error`
(the CLI tests run them): an exception, a hang, a wrong shape and a wrong dtype; and on the GPU
path (the GPU tests run them) an exception and a result that is not on the device."""
import time

import numpy as np

import bitcheck_py


@bitcheck_py.impl(op="matmul", invariant=True)
def raises(x, w):
    raise RuntimeError("this impl raises on purpose")


@bitcheck_py.impl(op="matmul", invariant=True)
def hangs(x, w):
    while True:
        time.sleep(3600)


@bitcheck_py.impl(op="matmul", invariant=True)
def wrong_shape(x, w):
    return np.zeros((x.shape[0], w.shape[0] + 1), dtype=np.float32)


@bitcheck_py.impl(op="matmul", invariant=True)
def wrong_dtype(x, w):
    return (x @ w.T).astype(np.float64)


def not_declared(x, w):
    return x @ w.T


@bitcheck_py.impl(op="matmul", invariant=True, backend="cuda", dtypes=("bf16",))
def raises_cuda(x, w):
    raise RuntimeError("this CUDA impl raises on purpose")


@bitcheck_py.impl(op="matmul", invariant=True, backend="cuda", dtypes=("bf16",))
def on_the_host_cuda(x, w):
    return (x @ w.T).cpu()


@bitcheck_py.impl(op="matmul", invariant=True, backend="cuda", dtypes=("bf16",))
def wrong_shape_cuda(x, w):
    return (x @ w.T)[:, 1:]
