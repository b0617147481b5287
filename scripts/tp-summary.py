#!/usr/bin/env python3
"""The tables of a tensor-parallel run, from its report (bitcheck sweep --devices, tp > 1 cases).

usage: scripts/tp-summary.py REPORT.json > tp-summary.md
       scripts/tp-summary.py selftest

- verdicts per op, impl, dtype and tp;
- where each observed or claimed impl first drifts, per op, dtype and tp (the smallest batch M);
- what NCCL chose per case (the recorded "nccl:" paths: function.algorithm.protocol.channels), with
  the batches at which the choice changes;
- across TP sizes: per impl the cases at tp > 1 whose canonical layouts matched their rows at
  tp = 1 bit for bit, and those that did not.
Standard library only.
"""
import collections
import json
import sys


def verdict_table(results):
    counts = collections.OrderedDict()
    for case in results:
        key = (case["op"], case["impl"], case["dtype"], case.get("tp", 1))
        counts.setdefault(key, collections.Counter())[case["verdict"]] += 1
    lines = ["| op | impl | dtype | tp | verdicts |", "|---|---|---|---|---|"]
    for (op, impl, dtype, tp), counter in counts.items():
        shown = ", ".join("%s %d" % (verdict, count) for verdict, count in sorted(counter.items()))
        lines.append("| %s | %s | %s | %d | %s |" % (op, impl, dtype, tp, shown))
    return lines


def first_drift_table(results):
    batches = collections.OrderedDict()
    for case in results:
        if case["verdict"] == "skipped":
            continue
        key = (case["op"], case["impl"], case["dtype"], case.get("tp", 1))
        entry = batches.setdefault(key, {"ran": [], "drifted": []})
        entry["ran"].append(case["rows"])
        if case["verdict"] in ("drift", "nondeterministic"):
            entry["drifted"].append(case["rows"])
    lines = ["| op | impl | dtype | tp | batches run | first drift at M | drifted at |",
             "|---|---|---|---|---|---|---|"]
    for (op, impl, dtype, tp), entry in batches.items():
        drifted = sorted(entry["drifted"])
        lines.append("| %s | %s | %s | %d | %d | %s | %s |" % (
            op, impl, dtype, tp, len(entry["ran"]), drifted[0] if drifted else "none",
            ", ".join(str(m) for m in drifted) if drifted else ""))
    return lines


def nccl_choices(case):
    chosen = set()
    for layout, paths in case.get("paths", {}).items():
        for path in paths:
            if path.startswith("nccl:"):
                chosen.add(path[len("nccl:"):])
    return sorted(chosen)


def nccl_table(results):
    rows = collections.OrderedDict()
    for case in results:
        if case["verdict"] == "skipped" or case.get("tp", 1) == 1:
            continue
        choices = nccl_choices(case)
        if not choices:
            continue
        key = (case["op"], case["impl"], case["dtype"], case.get("tp", 1))
        rows.setdefault(key, []).append((case["rows"], " ".join(choices), case["verdict"]))
    lines = ["| op | impl | dtype | tp | M: NCCL's choices (verdict), where they change |",
             "|---|---|---|---|---|"]
    for (op, impl, dtype, tp), points in rows.items():
        points.sort()
        changes, previous = [], None
        for rows_count, choice, verdict in points:
            if choice != previous:
                changes.append("M=%d: %s (%s)" % (rows_count, choice, verdict))
                previous = choice
        lines.append("| %s | %s | %s | %d | %s |" % (op, impl, dtype, tp, "; ".join(changes)))
    return lines


def cross_tp_table(results):
    counts = collections.OrderedDict()
    for case in results:
        if case.get("tp", 1) == 1 or case["verdict"] in ("skipped", "error"):
            continue
        key = (case["op"], case["impl"], case.get("tp", 1))
        entry = counts.setdefault(key, {"cases": 0, "differ": 0})
        entry["cases"] += 1
        across = [d for d in case.get("drift", []) + case.get("cross_tp_drift", [])
                  if d.get("reference_layout", "").endswith("/tp=1")]
        if across:
            entry["differ"] += 1
    lines = ["| op | impl | tp | cases | canonical rows differ from tp = 1 in |", "|---|---|---|---|---|"]
    for (op, impl, tp), entry in counts.items():
        lines.append("| %s | %s | %d | %d | %d |" % (op, impl, tp, entry["cases"], entry["differ"]))
    return lines


def render(report):
    meta = report["meta"]
    cuda = meta.get("cuda", {})
    nccl = cuda.get("nccl", {})
    out = ["# Tensor parallelism", "",
           "- command: `%s`" % meta.get("command_line", ""),
           "- git: %s; device: %s x %d ranks; NCCL %s (%s); paths recorded: %s" % (
               meta.get("git_revision", "?"), cuda.get("gpu_name", "?"),
               meta.get("rank_group", {}).get("size", 1), nccl.get("version", "?"),
               nccl.get("library", "?"), nccl.get("paths_recorded", False)),
           "- rank groups started: %s, faults: %d" % (
               meta.get("rank_group", {}).get("groups_started", 0),
               len(meta.get("rank_group", {}).get("faults", [])))]
    teams = meta.get("rank_group", {}).get("teams", [])
    if teams:  # groups of one size side by side, sizes one after another
        out.append("- teams: " + "; ".join(
            "%d cases on %s" % (team.get("cases", 0), ",".join(team.get("devices", [])))
            for team in teams))
    # Wall time: the rank groups' (the merged report's first source), then the shards' after them.
    sources = meta.get("shards", [])
    groups = [s for s in sources if str(s.get("source", "")).startswith("rank group")]
    shards = [s for s in sources if not str(s.get("source", "")).startswith("rank group")]
    if groups and groups[0].get("wall_seconds", 0) > 0:
        line = "- wall: rank groups %.0f s" % groups[0]["wall_seconds"]
        if shards:
            line += ", then %d shards %.0f s" % (
                len(shards), max(s.get("wall_seconds", 0) for s in shards))
        out.append(line + "; the sweep %.0f s" % meta.get("wall_seconds", 0))
    out += ["", "## Verdicts", ""]
    results = report["results"]
    out += verdict_table(results)
    out += ["", "## Where each impl first drifts", ""] + first_drift_table(results)
    out += ["", "## What NCCL chose", ""] + nccl_table(results)
    out += ["", "## Across TP sizes", ""] + cross_tp_table(results)
    return "\n".join(out) + "\n"


def selftest():
    def case(impl, tp, rows, verdict, paths=None, cross=False):
        entry = {"op": "all_reduce", "impl": impl, "dtype": "bf16", "tp": tp, "rows": rows,
                 "verdict": verdict, "paths": {"batch": paths or []}, "drift": []}
        if cross:
            entry["cross_tp_drift"] = [{"reference_layout": "alone/tp=1"}]
        return entry
    report = {"meta": {"command_line": "bitcheck sweep", "cuda": {"gpu_name": "GPU",
                                                                   "nccl": {"version": "2.28.9"}},
                       "rank_group": {"size": 4, "groups_started": 3, "faults": [],
                                      "teams": [{"group_size": 4, "devices": ["0", "1", "2", "3"],
                                                 "cases": 3},
                                                {"group_size": 2, "devices": ["0", "1"],
                                                 "cases": 1},
                                                {"group_size": 2, "devices": ["2", "3"],
                                                 "cases": 1}]},
                       "shards": [{"source": "rank group of 4", "wall_seconds": 445.2},
                                  {"source": "shard 0/2 on device 0", "wall_seconds": 49.4},
                                  {"source": "shard 1/2 on device 1", "wall_seconds": 47.8}],
                       "wall_seconds": 495.1},
              "results": [case("nccl-default", 4, 1, "pass", ["nccl:allreduce.ring.ll.ch4"]),
                          case("nccl-default", 4, 2, "drift", ["nccl:allreduce.ring.ll.ch4"]),
                          case("nccl-default", 4, 4096, "drift", ["nccl:allreduce.ring.simple.ch16"]),
                          case("fixed-order", 4, 2, "pass", cross=True),
                          case("fixed-order", 1, 2, "pass")]}
    text = render(report)
    checks = ["| all_reduce | nccl-default | bf16 | 4 | 3 | 2 | 2, 4096 |",
              "M=1: allreduce.ring.ll.ch4 (pass); M=4096: allreduce.ring.simple.ch16 (drift)",
              "| all_reduce | fixed-order | 4 | 1 | 1 |", "NCCL 2.28.9",
              "- teams: 3 cases on 0,1,2,3; 1 cases on 0,1; 1 cases on 2,3",
              "- wall: rank groups 445 s, then 2 shards 49 s; the sweep 495 s"]
    failed = [check for check in checks if check not in text]
    if failed:
        print(text)
        print("selftest: missing %s" % failed)
        return 1
    print("tp-summary selftest: ok")
    return 0


def main(argv):
    if len(argv) == 2 and argv[1] == "selftest":
        return selftest()
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[1]) as handle:
        sys.stdout.write(render(json.load(handle)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
