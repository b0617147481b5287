"""PyTorch's defaults as bitcheck observations on the GPU (library_default=True: whether they drift
depends on the GPU, the shape and the library version; the report records what they did and never
counts it as a failure). The tensors are bitcheck's own device buffers, as torch tensors:

    PYTHONPATH=python/examples bitcheck sweep --py-impl torch_defaults:linear \\
        --impl py:torch_defaults:linear --op matmul --dtype bf16 --backend cuda

Each function is the call a model file makes: F.linear, F.rms_norm, the hand-written RMSNorm of
many model files (torch.mean over the row), log_softmax + gather, F.embedding and its autograd
backward, F.scaled_dot_product_attention for prefill and decode against a KV cache.
"""
import functools

import torch
import torch.nn.functional as F

import bitcheck_py

DTYPES = ("bf16", "fp32", "fp16")
EPS = 1e-6  # bitcheck's rmsnorm

observation = functools.partial(bitcheck_py.impl, library_default=True, backend="cuda")


@observation(op="matmul", dtypes=DTYPES, description="F.linear (cuBLAS, its heuristic per shape)")
def linear(x, w):
    return F.linear(x, w)


@observation(op="rmsnorm", dtypes=DTYPES, description="F.rms_norm")
def rms_norm(x, weight):
    return F.rms_norm(x, (x.shape[-1],), weight.reshape(-1), eps=EPS)


@observation(op="rmsnorm", dtypes=DTYPES,
             description="hand-written RMSNorm: x * rsqrt(x.float().pow(2).mean(-1) + eps), "
                         "times weight in the input dtype (torch.mean's reduction)")
def rms_norm_mean(x, weight):
    hidden = x.float()
    variance = hidden.pow(2).mean(-1, keepdim=True)
    return weight.reshape(-1) * (hidden * torch.rsqrt(variance + EPS)).to(x.dtype)


@observation(op="logprob", dtypes=DTYPES, description="log_softmax in fp32 + gather")
def logprob(logits, target):
    logp = torch.log_softmax(logits.float(), dim=-1)
    return logp.gather(-1, target.long().unsqueeze(-1)).squeeze(-1)


@observation(op="embedding", dtypes=DTYPES, passes=("forward", "backward"),
             description="F.embedding; backward: autograd's dense embedding gradient (fp32)")
def embedding(ids, table, *grad):
    if not grad:
        return F.embedding(ids.long(), table)
    (dout,) = grad
    weight = table.detach().float().requires_grad_(True)
    F.embedding(ids.long(), weight).backward(dout.float())
    return weight.grad


def _log_sum_exp(q, k, start_position):
    """The softmax's natural log-sum-exp per query (H, L), which SDPA does not return: in fp64
    from the same scores, so its own rounding cannot move with the batch."""
    keys = k.double().repeat_interleave(q.shape[0] // k.shape[0], dim=0)  # grouped-query heads
    scores = torch.matmul(q.double(), keys.transpose(-1, -2)) / q.shape[-1] ** 0.5
    length, total = q.shape[1], k.shape[1]
    positions = torch.arange(length, device=q.device).unsqueeze(1) + start_position
    masked = torch.arange(total, device=q.device).unsqueeze(0) > positions
    return torch.logsumexp(scores.masked_fill(masked, float("-inf")), dim=-1).float()


@observation(op="attention", dtypes=DTYPES,
             description="F.scaled_dot_product_attention: is_causal for a prefill, no mask for a "
                         "one-token decode step, a bottom-right causal mask for a later chunk; "
                         "lse from the scores in fp64")
def sdpa(q, k, v, start_position):
    # q: (H, L, D), the new tokens at positions start_position ...; k, v: (KVH, start + L, D).
    length, total = q.shape[1], k.shape[1]
    options = {"enable_gqa": q.shape[0] != k.shape[0]}
    if start_position == 0:
        options["is_causal"] = True  # a prefill from the first token: PyTorch's causal path
    elif length > 1:  # a chunk against the cache: query i sees keys up to start_position + i
        positions = torch.arange(length, device=q.device).unsqueeze(1) + start_position
        options["attn_mask"] = torch.arange(total, device=q.device).unsqueeze(0) <= positions
    o = F.scaled_dot_product_attention(q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0),
                                       **options).squeeze(0)
    return o, _log_sum_exp(q, k, start_position)
