"""Python impls that fail on purpose, one per failure mode bitcheck must turn into a case `error`
(the CLI tests run them): an exception, a hang, a wrong shape and a wrong dtype; and on the GPU
path (the GPU tests run them) an exception, a result that is not on the device, and a call that
reads a value back to the host (it runs eagerly, but cannot be captured into a CUDA graph: the
graph layout skips it). kills_bitcheck
kills the bitcheck process that called it, on its second call, and dies_every_second_call exits its
worker on the second call of each: the CLI tests check that no shared memory is left behind and
that a new worker gets the shared buffer."""
import os
import signal
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


_calls = {"kills_bitcheck": 0, "dies_every_second_call": 0}


@bitcheck_py.impl(op="matmul", invariant=True)
def kills_bitcheck(x, w):
    """Answers once (bitcheck's shared buffer is then mapped here), then, on the next call, writes
    bitcheck's pid to $BITCHECK_TEST_PID_FILE and kills it: no destructor of it runs."""
    _calls["kills_bitcheck"] += 1
    if _calls["kills_bitcheck"] == 1:
        return x @ w.T
    with open(os.environ["BITCHECK_TEST_PID_FILE"], "w") as file:
        file.write(str(os.getppid()))
    os.kill(os.getppid(), signal.SIGKILL)
    while True:
        time.sleep(3600)


@bitcheck_py.impl(op="matmul", invariant=True)
def dies_every_second_call(x, w):
    """Each worker process answers its first call and exits on its second: bitcheck starts a new
    worker for the call after, which must find the shared buffer under its new name."""
    _calls["dies_every_second_call"] += 1
    if _calls["dies_every_second_call"] == 2:
        os._exit(3)
    return x @ w.T


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


@bitcheck_py.impl(op="matmul", invariant=True, backend="cuda", dtypes=("bf16",))
def reads_back_cuda(x, w):
    import torch  # the GPU path only: the CPU tests run this file without torch

    y = x @ w.T
    if not bool(torch.isfinite(y).all().item()):  # a host round trip: synchronizes the stream
        raise RuntimeError("non-finite output")
    return y
