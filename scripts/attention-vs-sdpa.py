#!/usr/bin/env python3
# The attention bench against PyTorch SDPA from one GPU run: joins `bitcheck bench` reports
# (forward, backward, decode: sweeps/bench-attention*.json) with scripts/bench-attention-sdpa.py
# --json rows on (head dim, length, batch) and writes a markdown table of times, TFLOP/s and the
# ratio SDPA time / ours (above 1: ours is faster), with the geometric mean per table.
#   attention-vs-sdpa.py --forward F.json... --backward B.json... --decode D.json... \
#       --sdpa S.json... --sdpa-decode SD.json... [--title TEXT] [--out FILE.md]
#   attention-vs-sdpa.py selftest
# Several files per flag are rounds of one call (scripts/gpu-attention-bench.sh --rounds N: bitcheck
# and SDPA taking turns), paired in order: the table then gives each side's median time over the
# rounds, the median of the rounds' ratios and their range. SDPA's time moves between calls and
# rounds far more than bitcheck's (up to 15 % at L = 4096 on an H100), so one round's ratio says
# little at the 5 % level. Exit 2 on a file that cannot be read or flags with different round counts.
import argparse
import json
import math
import os
import statistics
import sys
import tempfile


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as error:
        raise SystemExit(f"attention-vs-sdpa: {path}: cannot read it as JSON ({error})")


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


def joined(our_reports, sdpa_rows, key):
    """Per shape of the first round's report: ([our ms per round], [SDPA ms per round], path), for
    the shapes every round has on both sides."""
    shapes = {}
    for shape, (_, kernel) in sorted(ours(our_reports[0]).items()):
        mine = [ours(report).get(shape) for report in our_reports]
        base = [rows.get(shape) for rows in sdpa_rows]
        if any(m is None for m in mine) or any(b is None for b in base):
            continue
        shapes[shape] = ([m[0] for m in mine], [b[key] for b in base], kernel)
    return shapes


def summary(our_ms, sdpa_ms):
    """Median times, the median of the rounds' ratios, and their range as text ('' for one round)."""
    ratios = [s / o for o, s in zip(our_ms, sdpa_ms)]
    spread = f"{min(ratios):.2f}-{max(ratios):.2f}x" if len(ratios) > 1 else ""
    return statistics.median(our_ms), statistics.median(sdpa_ms), statistics.median(ratios), spread


def rounds_of(args):
    counts = {flag: len(files) for flag, files in vars(args).items()
              if flag in ("forward", "backward", "decode", "sdpa", "sdpa_decode") and files}
    if len(set(counts.values())) > 1:
        raise SystemExit("attention-vs-sdpa: every flag needs the same number of files (rounds), got "
                         + ", ".join(f"--{flag.replace('_', '-')} {n}" for flag, n in counts.items()))
    return next(iter(counts.values()))


def render(args):
    rounds = rounds_of(args)
    sdpa_reports = [load(path) for path in args.sdpa]
    sdpa = sdpa_reports[0]
    sdpa_rows = [{(r["dim"], r["length"], r["batch"]): r for r in report["rows"]}
                 for report in sdpa_reports]
    meta = {}
    lines = [f"## {args.title}", ""]
    spread_header = ["SDPA / ours, range over rounds"] if rounds > 1 else []
    for name, paths, key, flop_factor in (("Forward", args.forward, "forward_ms", 1.0),
                                          ("Forward + backward", args.backward,
                                           "forward_backward_ms", 3.5)):
        if not paths:
            continue
        reports = [load(path) for path in paths]
        meta = reports[0].get("meta", meta)
        body, ratios = [], []
        for (dim, length, batch), (mine, base, kernel) in joined(reports, sdpa_rows, key).items():
            ms, base_ms, ratio, spread = summary(mine, base)
            flops = flop_factor * 4.0 * batch * length * length / 2 * sdpa["heads"] * dim
            ratios.append(ratio)
            body.append([str(dim), str(length), str(batch), f"{ms:.3f}", f"{flops / ms / 1e9:.0f}",
                         f"{base_ms:.3f}", f"{flops / base_ms / 1e9:.0f}", f"{ratio:.2f}x"] +
                        ([spread] if rounds > 1 else []) + [kernel])
        lines += table(name, ["D", "L", "batch", "ours ms", "ours TFLOP/s", "SDPA ms",
                              "SDPA TFLOP/s", "SDPA / ours"] + spread_header + ["our path"],
                       body, ratios)
    if args.decode and args.sdpa_decode:
        reports = [load(path) for path in args.decode]
        meta = reports[0].get("meta", meta)
        decode_rows = [{(r["dim"], r["length"], r["batch"]): r for r in load(path)["rows"]}
                       for path in args.sdpa_decode]
        body, ratios = [], []
        for (dim, length, batch), (mine, base, kernel) in joined(reports, decode_rows,
                                                                 "decode_ms").items():
            ms, base_ms, ratio, spread = summary(mine, base)
            ratios.append(ratio)
            body.append([str(dim), str(length), str(batch), f"{ms * 1e3:.1f}",
                         f"{base_ms * 1e3:.1f}", f"{ratio:.2f}x"] +
                        ([spread] if rounds > 1 else []) + [kernel])
        lines += table("Decode step (one query per sequence over L cached keys)",
                       ["D", "L", "sequences", "ours us", "SDPA us", "SDPA / ours"] +
                       spread_header + ["our path"], body, ratios)
    device = meta.get("cuda", {}).get("gpu_name") or sdpa.get("device")
    repeats = args.repeats
    if not repeats:
        median = "median of repeats"
    elif repeats >= 300:  # gpu-attention-bench.sh's default
        median = (f"median of {repeats} timed launches per point on each side (sustained: long "
                  "enough that both run at the card's power limit)")
    else:
        median = (f"median of {repeats} timed launches per point on each side (short runs: part of "
                  "them may run below the card's power limit, and the two sides need not gain "
                  "alike from that)")
    timing = (f"Both timed in the same call on the same GPU: CUDA events, {median}." if
              rounds == 1 else
              f"Both timed in the same call on the same GPU, {rounds} rounds taking turns (bitcheck's "
              f"benches, then SDPA's): CUDA events, {median}; the times are the medians over "
              "the rounds, the ratio the median of the rounds' ratios.")
    lines.insert(2, f"Device: {device}; SDPA: torch {sdpa.get('torch')}, {sdpa.get('dtype')}, "
                    f"{sdpa.get('heads')} heads, {sdpa.get('kv_heads')} KV heads, causal. " + timing)
    lines.insert(3, "")
    return "\n".join(lines)


def selftest():
    """Made-up rounds: medians, the ratio's median and range, one-round output, a count mismatch."""
    def bench(times):  # {L: ms} for head dim 128, batch 4
        return {"meta": {"cuda": {"gpu_name": "GPU"}}, "results": [
            {"op": "attention", "claims_invariance": True, "dims": {"D": 128, "L": L}, "rows": 4,
             "median_ms": ms, "config": {"path": "forward.wgmma.prefill"}} for L, ms in times.items()]
            + [{"op": "attention", "claims_invariance": False, "dims": {"D": 128, "L": 2048},
                "rows": 4, "median_ms": 0.001, "config": {}}]}

    def sdpa(times):
        return {"device": "GPU", "torch": "t", "dtype": "bf16", "heads": 32, "kv_heads": 8, "rows": [
            {"dim": 128, "length": L, "batch": 4, "forward_ms": ms, "forward_backward_ms": 3 * ms}
            for L, ms in times.items()]}

    with tempfile.TemporaryDirectory() as tmp:
        def write(name, data):
            path = os.path.join(tmp, name)
            with open(path, "w") as f:
                json.dump(data, f)
            return path
        ours_files = [write(f"f{i}.json", bench({2048: ms, 4096: 1.0})) for i, ms in
                      enumerate([0.30, 0.29, 0.31])]
        sdpa_files = [write(f"s{i}.json", sdpa({2048: ms, 4096: 0.9})) for i, ms in
                      enumerate([0.30, 0.27, 0.33])]
        parser = arguments()
        text = render(parser.parse_args(["--forward", *ours_files, "--sdpa", *sdpa_files]))
        # L = 2048: ours median 0.300, SDPA median 0.300; ratios 1.00, 0.93, 1.06: median 1.00.
        expect = ["| 128 | 2048 | 4 | 0.300 |", "| 0.300 |", "| 1.00x | 0.93-1.06x |",
                  "| 128 | 4096 | 4 | 1.000 |", "| 0.90x | 0.90-0.90x |", "3 rounds taking turns"]
        missing = [e for e in expect if e not in text]
        one = render(parser.parse_args(["--forward", ours_files[0], "--sdpa", sdpa_files[0]]))
        if "range" in one or "| 1.00x | forward.wgmma.prefill |" not in one:
            missing.append("one round: no range column")
        if "median of repeats" not in one or "sustained" in one or "short" in one:
            missing.append("default repeats: 'median of repeats' in the header")
        sustained = render(parser.parse_args(["--forward", *ours_files, "--sdpa", *sdpa_files,
                                              "--repeats", "300"]))
        if "median of 300 timed launches per point on each side (sustained" not in sustained:
            missing.append("--repeats 300: the count in the header")
        short = render(parser.parse_args(["--forward", *ours_files, "--sdpa", *sdpa_files,
                                          "--repeats", "30"]))
        if "median of 30 timed launches per point on each side (short runs" not in short:
            missing.append("--repeats 30: short runs in the header")
        try:
            render(parser.parse_args(["--forward", *ours_files, "--sdpa", sdpa_files[0]]))
            missing.append("a round-count mismatch must fail")
        except SystemExit as error:
            if "same number of files" not in str(error):
                missing.append(f"round-count mismatch message: {error}")
    if missing:
        print("attention-vs-sdpa selftest FAILED:", *missing, sep="\n  ")
        print(text)
        return 1
    print("attention-vs-sdpa selftest: ok")
    return 0


def arguments():
    parser = argparse.ArgumentParser()
    for flag in ("--forward", "--backward", "--decode", "--sdpa-decode"):
        parser.add_argument(flag, nargs="+")
    parser.add_argument("--sdpa", nargs="+", required=True)
    parser.add_argument("--title", default="Attention against PyTorch SDPA")
    parser.add_argument("--repeats", type=int, help="the timed launches per point both sides ran")
    parser.add_argument("--out")
    return parser


def main():
    if sys.argv[1:] == ["selftest"]:
        return selftest()
    args = arguments().parse_args()
    try:
        text = render(args)
    except SystemExit as error:
        if isinstance(error.code, str):
            print(error.code, file=sys.stderr)
            return 2
        raise
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
