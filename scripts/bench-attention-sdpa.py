#!/usr/bin/env python3
# PyTorch SDPA (causal, GQA) TFLOP/s for the shapes `bitcheck bench --op attention` times, as the
# baseline for the fixed-order kernel. Same flop count: forward 2*2*S*S/2*H*D per sequence,
# backward 2.5x forward. Usage: bench-attention-sdpa.py [--batch B] [--seqs 1024,2048,...] [--dims 64,128]
# With --decode: the latency of one decode step (one query per sequence over a cache of L keys) at
# the batches of --batches, as `bitcheck bench --spec sweeps/bench-attention-decode.json` times it.
# --json FILE also writes the rows as JSON (scripts/attention-vs-sdpa.py joins them with bitcheck
# bench's reports).
import argparse
import json
import sys

import torch
import torch.nn.functional as F


def time_ms(fn, warmup, repeats):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    times.sort()
    return times[len(times) // 2]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--seqs", default="1024,2048,4096,8192")
    parser.add_argument("--dims", default="128,64")
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--decode", action="store_true", help="time one decode step instead")
    parser.add_argument("--batches", default="1,8,64", help="--decode: batch sizes")
    parser.add_argument("--json", help="also write the rows to this JSON file")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 3
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    rows = []
    status = decode(args, dtype, rows) if args.decode else prefill(args, dtype, rows)
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "dtype": args.dtype, "heads": args.heads, "kv_heads": args.kv_heads,
                       "rows": rows}, out, indent=1)
    return status


def prefill(args, dtype, rows):
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}  dtype {args.dtype}")
    # fwd+bwd_TFLOP/s: 3.5x the forward's flops over the forward-and-backward time, the figure
    # `bitcheck bench --pass backward` reports (its backward run includes the forward).
    print("dim  seq    batch  fwd_ms    fwd_TFLOP/s  fwd+bwd_ms  bwd_TFLOP/s  fwd+bwd_TFLOP/s")
    for dim in [int(d) for d in args.dims.split(",")]:
        for seq in [int(s) for s in args.seqs.split(",")]:
            shape_q = (args.batch, args.heads, seq, dim)
            shape_kv = (args.batch, args.kv_heads, seq, dim)
            q = torch.randn(shape_q, device="cuda", dtype=dtype, requires_grad=True)
            k = torch.randn(shape_kv, device="cuda", dtype=dtype, requires_grad=True)
            v = torch.randn(shape_kv, device="cuda", dtype=dtype, requires_grad=True)
            try:
                F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
                attend = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            except TypeError:  # older torch: expand the kv heads (outside the timed region)
                group = args.heads // args.kv_heads
                k2 = k.detach().repeat_interleave(group, dim=1).requires_grad_()
                v2 = v.detach().repeat_interleave(group, dim=1).requires_grad_()
                attend = lambda: F.scaled_dot_product_attention(q, k2, v2, is_causal=True)
            grad = torch.randn(shape_q, device="cuda", dtype=dtype)
            flops = 4.0 * args.batch * seq * seq / 2 * args.heads * dim
            with torch.no_grad():
                forward_ms = time_ms(attend, args.warmup, args.repeats)
            both_ms = time_ms(lambda: attend().backward(grad), args.warmup, args.repeats)
            print(f"{dim:<4} {seq:<6} {args.batch:<6} {forward_ms:<9.3f} {flops / forward_ms / 1e9:<12.1f} "
                  f"{both_ms:<11.3f} {2.5 * flops / max(both_ms - forward_ms, 1e-6) / 1e9:<12.1f} "
                  f"{3.5 * flops / both_ms / 1e9:.1f}")
            rows.append({"dim": dim, "length": seq, "batch": args.batch, "forward_ms": forward_ms,
                         "forward_backward_ms": both_ms})
    return 0


def decode(args, dtype, rows):
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}  dtype {args.dtype}  decode step")
    print("dim  cache  batch  latency_us  TFLOP/s  GB/s")
    for dim in [int(d) for d in args.dims.split(",")]:
        for seq in [int(s) for s in args.seqs.split(",")]:
            for batch in [int(b) for b in args.batches.split(",")]:
                q = torch.randn((batch, args.heads, 1, dim), device="cuda", dtype=dtype)
                k = torch.randn((batch, args.kv_heads, seq, dim), device="cuda", dtype=dtype)
                v = torch.randn((batch, args.kv_heads, seq, dim), device="cuda", dtype=dtype)
                try:
                    F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
                    attend = lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
                except TypeError:
                    group = args.heads // args.kv_heads
                    k2, v2 = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
                    attend = lambda: F.scaled_dot_product_attention(q, k2, v2)
                with torch.no_grad():
                    ms = time_ms(attend, args.warmup, args.repeats)
                flops = 4.0 * batch * seq * args.heads * dim
                cache_bytes = 2.0 * batch * seq * args.kv_heads * dim * q.element_size()
                print(f"{dim:<4} {seq:<6} {batch:<6} {ms * 1e3:<11.1f} {flops / ms / 1e9:<8.2f} {cache_bytes / ms / 1e6:.0f}")
                rows.append({"dim": dim, "length": seq, "batch": batch, "decode_ms": ms})
    return 0


if __name__ == "__main__":
    sys.exit(main())
