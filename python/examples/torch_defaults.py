"""PyTorch's library defaults as bitcheck observations (invariant=False: whether they drift depends
on GPU, shape and library version; the report records what they did). For the GPU path of --py-impl:

    bitcheck sweep --py-impl torch_defaults:linear --op matmul --dtype bf16 --backend cuda
"""
import torch
import torch.nn.functional as F

import bitcheck_py

DTYPES = ("bf16", "fp32", "fp16")


@bitcheck_py.impl(op="matmul", dtypes=DTYPES, description="F.linear (cuBLAS heuristic)")
def linear(x, w):
    return F.linear(x, w)


@bitcheck_py.impl(op="rmsnorm", dtypes=DTYPES, description="F.rms_norm")
def rms_norm(x, weight):
    return F.rms_norm(x, (x.shape[-1],), weight.reshape(-1), eps=1e-6)


@bitcheck_py.impl(op="logprob", dtypes=DTYPES, description="log_softmax + gather")
def logprob(logits, target):
    logp = torch.log_softmax(logits.float(), dim=-1)
    return logp.gather(-1, target.long().unsqueeze(-1)).squeeze(-1)


@bitcheck_py.impl(op="embedding", dtypes=DTYPES, passes=("forward", "backward"),
                  description="F.embedding forward; autograd backward (index_add / atomics)")
def embedding(ids, table, *grad):
    if not grad:
        return F.embedding(ids.long(), table)
    (dout,) = grad
    weight = table.detach().float().requires_grad_(True)
    F.embedding(ids.long(), weight).backward(dout.float())
    return weight.grad


@bitcheck_py.impl(op="attention", dtypes=("bf16", "fp16"),
                  description="F.scaled_dot_product_attention, prefill and decode")
def sdpa(q, k, v, start_position):
    # q: (H, L, D) new tokens at positions start_position..; k, v: (KVH, start_position + L, D).
    heads, kv_heads = q.shape[0], k.shape[0]
    if kv_heads != heads:
        k = k.repeat_interleave(heads // kv_heads, dim=0)
        v = v.repeat_interleave(heads // kv_heads, dim=0)
    length, total = q.shape[1], k.shape[1]
    rows = torch.arange(length, device=q.device).unsqueeze(1) + start_position
    mask = torch.arange(total, device=q.device).unsqueeze(0) <= rows
    return F.scaled_dot_product_attention(q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0),
                                          attn_mask=mask).squeeze(0)
