"""A fixed-order Triton matmul (y = x w^T) that claims invariance: one program per (BLOCK_M rows,
BLOCK_N columns) tile, K walked in BLOCK_K steps in index order into one fp32 accumulator, no
split-K and no choice made from the batch: the block sizes are constants (never picked from M, no
autotuning) and M is not specialized on (one compiled kernel for every batch size), so a row's
arithmetic does not depend on which rows share its batch. On the GPU path of --py-impl:

    PYTHONPATH=python/examples bitcheck sweep --py-impl triton_matmul:matmul \
        --impl py:triton_matmul:matmul --op matmul --dtype bf16 --backend cuda
"""
import torch
import triton
import triton.language as tl

import bitcheck_py

BLOCK_M, BLOCK_N, BLOCK_K = 64, 64, 64


@triton.jit(do_not_specialize=["M"])  # one compiled kernel for every batch size
def _matmul_kernel(x, w, y, M, N, K, stride_xm, stride_wn, stride_ym,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        a = tl.load(x + rows[:, None] * stride_xm + ks[None, :],
                    mask=(rows[:, None] < M) & (ks[None, :] < K), other=0.0)
        b = tl.load(w + cols[None, :] * stride_wn + ks[:, None],
                    mask=(cols[None, :] < N) & (ks[:, None] < K), other=0.0)
        acc = tl.dot(a, b, acc, input_precision="ieee")
    tl.store(y + rows[:, None] * stride_ym + cols[None, :], acc.to(y.dtype.element_ty),
             mask=(rows[:, None] < M) & (cols[None, :] < N))


@bitcheck_py.impl(op="matmul", invariant=True, backend="cuda", dtypes=("bf16", "fp16", "fp32"),
                  description="Triton, fixed 64x64x64 tiles, K in index order, fp32 accumulator, "
                              "no split-K (fp32 without TF32)")
def matmul(x, w):
    x, w = x.contiguous(), w.contiguous()
    m, k = x.shape
    n = w.shape[0]
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(m, BLOCK_M), triton.cdiv(n, BLOCK_N))
    _matmul_kernel[grid](x, w, y, m, n, k, x.stride(0), w.stride(0), y.stride(0),
                         BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K)
    return y
