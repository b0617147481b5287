#!/usr/bin/env python3
# The attention bench against PyTorch SDPA from one GPU run: joins `bitcheck bench` reports
# (forward, backward, decode: sweeps/bench-attention*.json) with scripts/bench-attention-sdpa.py
# --json rows on (head dim, length, batch) and writes a markdown table of times, TFLOP/s and the
# ratio SDPA time / ours (above 1: ours is faster), with the geometric mean per table.
#   attention-vs-sdpa.py --forward F.json --backward B.json --decode D.json \
#       --sdpa S.json --sdpa-decode SD.json [--title TEXT] [--out FILE.md]
import argparse
import json
import math
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


def ours(report):
    """(dim, length, batch) -> (median ms, path) of the invariant impl's rows."""
    rows = {}
    for result in report.get("results", []):
        if result.get("op") != "attention" or not result.get("claims_invariance"):
            continue
        dims = result["dims"]
        config = result.get("config", {})
        rows[(dims["D"], dims["L"], result["rows"])] = (result["median_ms"], config.get("path", ""))
    return rows


def table(title, header, lines, ratios):
    out = [f"### {title}", "", "| " + " | ".join(header) + " |",
           "|" + "---|" * len(header)]
    out += ["| " + " | ".join(line) + " |" for line in lines]
    if ratios:
        geomean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        out += ["", f"Geometric mean of SDPA time / ours: {geomean:.2f}x over {len(ratios)} shapes."]
    return out + [""]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--forward")
    parser.add_argument("--backward")
    parser.add_argument("--decode")
    parser.add_argument("--sdpa", required=True)
    parser.add_argument("--sdpa-decode")
    parser.add_argument("--title", default="Attention against PyTorch SDPA")
    parser.add_argument("--out")
    args = parser.parse_args()
    sdpa = load(args.sdpa)
    meta = {}
    lines = [f"## {args.title}", ""]
    sdpa_rows = {(r["dim"], r["length"], r["batch"]): r for r in sdpa["rows"]}
    for name, path, key, flop_factor in (("Forward", args.forward, "forward_ms", 1.0),
                                         ("Forward + backward", args.backward,
                                          "forward_backward_ms", 3.5)):
        if not path:
            continue
        report = load(path)
        meta = report.get("meta", meta)
        body, ratios = [], []
        for (dim, length, batch), (ms, kernel) in sorted(ours(report).items()):
            base = sdpa_rows.get((dim, length, batch))
            if not base:
                continue
            flops = flop_factor * 4.0 * batch * length * length / 2 * sdpa["heads"] * dim
            ratio = base[key] / ms
            ratios.append(ratio)
            body.append([str(dim), str(length), str(batch), f"{ms:.3f}", f"{flops / ms / 1e9:.0f}",
                         f"{base[key]:.3f}", f"{flops / base[key] / 1e9:.0f}", f"{ratio:.2f}x",
                         kernel])
        lines += table(name, ["D", "L", "batch", "ours ms", "ours TFLOP/s", "SDPA ms",
                              "SDPA TFLOP/s", "SDPA / ours", "our path"], body, ratios)
    if args.decode and args.sdpa_decode:
        report = load(args.decode)
        meta = report.get("meta", meta)
        decode_rows = {(r["dim"], r["length"], r["batch"]): r for r in load(args.sdpa_decode)["rows"]}
        body, ratios = [], []
        for (dim, length, batch), (ms, kernel) in sorted(ours(report).items()):
            base = decode_rows.get((dim, length, batch))
            if not base:
                continue
            ratio = base["decode_ms"] / ms
            ratios.append(ratio)
            body.append([str(dim), str(length), str(batch), f"{ms * 1e3:.1f}",
                         f"{base['decode_ms'] * 1e3:.1f}", f"{ratio:.2f}x", kernel])
        lines += table("Decode step (one query per sequence over L cached keys)",
                       ["D", "L", "sequences", "ours us", "SDPA us", "SDPA / ours", "our path"],
                       body, ratios)
    device = meta.get("cuda", {}).get("gpu_name") or sdpa.get("device")
    lines.insert(2, f"Device: {device}; SDPA: torch {sdpa.get('torch')}, {sdpa.get('dtype')}, "
                    f"{sdpa.get('heads')} heads, {sdpa.get('kv_heads')} KV heads, causal. "
                    "Both timed in the same call on the same GPU: CUDA events, median of repeats.")
    lines.insert(3, "")
    text = "\n".join(lines)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
