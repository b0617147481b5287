#!/usr/bin/env python3
"""The JSON side of scripts/mutation-test.sh (Python 3 standard library only, so it runs on the GPU
machine too): the planted bugs' headers, the manifest, a sweep report cut down to what a mutant
needs, and the markdown report with the mutation score.

  mutation-test.py check [--root DIR] [--bitcheck BIN]   headers valid, every patch applies
  mutation-test.py manifest --root DIR --out FILE [--only LIST] [--revision R]
  mutation-test.py filters MANIFEST                      the union of the sweep filters: "OPS IMPLS PASSES"
  mutation-test.py select MANIFEST [--only LIST]         the selected mutants' names, one a line
  mutation-test.py field MANIFEST NAME KEY               one field of one mutant (sweep-ops, ...)
  mutation-test.py summarize REPORT --out FILE [--name N] [--exit-code C] [--seconds S] [--timed-out]
                                 [--command CMD]
  mutation-test.py report DIR [DIR ...] [--out FILE] [--baseline FILE]   the markdown report of runs
  mutation-test.py selftest                              the judging logic on made-up results

A patch under scripts/mutants/ is NN-name.patch: a header of `# key: value` lines (continued by
`#   more text`) before the first `diff --git`, which git apply ignores, then the unified diff.
"""
import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import tempfile

REQUIRED = [
    "bitcheck mutant", "file", "path", "path-description", "expect-op", "expect-pass",
    "expect-tensor", "expect-impl", "sweep-ops", "sweep-impls", "sweep-passes", "why",
]
FAILING = ("drift", "nondeterministic", "inaccurate")
DETAILS_KEPT = 20  # failing cases kept with their findings per mutant (all are kept by id)


def patch_dir(root):
    """scripts/mutants/, or the directory in BITCHECK_MUTANTS_PATCHES (planted bugs kept outside
    the repository, say a reviewer's, in the same format)."""
    return os.environ.get("BITCHECK_MUTANTS_PATCHES") or os.path.join(root, "scripts", "mutants")


def patch_files(root):
    directory = patch_dir(root)
    if not os.path.isdir(directory):
        return []
    return sorted(os.path.join(directory, f) for f in os.listdir(directory) if f.endswith(".patch"))


def parse_header(text):
    """The `# key: value` fields before the first `diff --git`, continuation lines joined."""
    fields, last = {}, None
    for line in text.splitlines():
        if line.startswith("diff --git "):
            break
        continuation = re.match(r"^#\s{3,}(\S.*)$", line)
        field = re.match(r"^# ([a-z][a-z -]*): (.*)$", line)
        if continuation and last:
            fields[last] += " " + continuation.group(1).strip()
        elif field:
            last = field.group(1)
            fields[last] = field.group(2).strip()
        elif line.strip() and not line.startswith("#"):
            raise ValueError("text before the diff that is not a '# ' header line: " + line)
    return fields


def diff_files(text):
    return re.findall(r"^diff --git a/(\S+) b/", text, re.M)


def split_list(value):
    return [item.strip() for item in value.split(",") if item.strip()]


def read_mutant(path):
    text = open(path, encoding="utf-8").read()
    name = os.path.basename(path)[: -len(".patch")]
    fields = parse_header(text)
    problems = [f"missing header field '{key}'" for key in REQUIRED if not fields.get(key)]
    if not re.match(r"^\d\d-[a-z0-9-]+$", name):
        problems.append("the file name is not NN-name.patch (lower case, digits, dashes)")
    if fields.get("bitcheck mutant") and fields["bitcheck mutant"] != name:
        problems.append(f"'bitcheck mutant: {fields['bitcheck mutant']}' is not the file name")
    files = diff_files(text)
    if not files:
        problems.append("no 'diff --git' section")
    if fields.get("file") and fields["file"] not in files:
        problems.append(f"'file: {fields['file']}' is not a file the diff changes ({files})")
    ops, impls = split_list(fields.get("sweep-ops", "")), split_list(fields.get("sweep-impls", ""))
    passes = split_list(fields.get("sweep-passes", ""))
    if any(p not in ("forward", "backward") for p in passes):
        problems.append("sweep-passes must list forward and/or backward")
    if fields.get("expect-op") and fields["expect-op"] not in ops:
        problems.append(f"expect-op {fields['expect-op']} is not among sweep-ops")
    if fields.get("expect-impl") and fields["expect-impl"] not in impls:
        problems.append(f"expect-impl {fields['expect-impl']} is not among sweep-impls")
    if fields.get("expect-pass") and fields["expect-pass"] not in passes:
        problems.append(f"expect-pass {fields['expect-pass']} is not among sweep-passes")
    mutant = {
        "name": name,
        "patch": os.path.relpath(path, os.path.dirname(os.path.dirname(os.path.dirname(path)))),
        "file": fields.get("file", ""),
        "files": files,
        "path": fields.get("path", ""),
        "path_description": fields.get("path-description", ""),
        "expect": {key: fields.get("expect-" + key, "") for key in ("op", "pass", "tensor", "impl")},
        "sweep": {"ops": ops, "impls": impls, "passes": passes},
        "why": fields.get("why", ""),
    }
    return mutant, problems


def registered_names(bitcheck):
    """Ops and impl names from `bitcheck list`."""
    listing = subprocess.run([bitcheck, "list"], capture_output=True, text=True, check=True).stdout
    ops = set(re.findall(r"^  (\S+)  ", listing, re.M))
    impls = set(m[1] for m in re.findall(r"^\s+[*~]?\s*(\S+?)/(\S+) \[(?:cpu|cuda)\]", listing, re.M))
    return ops, impls


def select(mutants, only):
    """--only: comma-separated numbers (01) or names; empty selects every mutant."""
    if not only:
        return mutants
    wanted = split_list(only)
    chosen = [m for m in mutants if any(m["name"] == w or m["name"].startswith(w + "-") for w in wanted)]
    unknown = [w for w in wanted if w != "baseline" and not any(
        m["name"] == w or m["name"].startswith(w + "-") for m in mutants)]
    if unknown:
        raise SystemExit(f"mutation-test: --only names no mutant: {', '.join(unknown)}")
    return chosen


def cmd_check(args):
    paths = patch_files(args.root)
    if not paths:
        print(f"mutation-test: no patches under {patch_dir(args.root)}")
        return 1
    ops = impls = None
    if args.bitcheck:
        ops, impls = registered_names(args.bitcheck)
    failures = 0
    for path in paths:
        mutant, problems = read_mutant(path)
        if ops is not None:
            problems += [f"sweep-ops names an unknown op '{o}'" for o in mutant["sweep"]["ops"] if o not in ops]
            problems += [f"sweep-impls names an unknown impl '{i}'" for i in mutant["sweep"]["impls"]
                         if i not in impls]
        applied = subprocess.run(["git", "apply", "--check", path], cwd=args.root,
                                 capture_output=True, text=True)
        if applied.returncode != 0:
            problems.append("does not apply to this tree: " + applied.stderr.strip().replace("\n", "; "))
        for problem in problems:
            print(f"{os.path.relpath(path, args.root)}: {problem}")
        failures += bool(problems)
    print(f"mutation-test: {len(paths)} patches, {len(paths) - failures} valid and applying, "
          f"{failures} with problems")
    return 1 if failures else 0


def cmd_manifest(args):
    mutants = []
    for path in patch_files(args.root):
        mutant, problems = read_mutant(path)
        if problems:
            raise SystemExit(f"mutation-test: {path}: " + "; ".join(problems))
        mutants.append(mutant)
    mutants = select(mutants, args.only)
    for mutant in mutants:
        mutant["binary"] = f"mutants/{mutant['name']}/bitcheck"
        mutant["op_filter"] = ",".join(mutant["sweep"]["ops"])
        mutant["impl_filter"] = ",".join(mutant["sweep"]["impls"])
        mutant["pass_filter"] = ",".join(mutant["sweep"]["passes"])
    manifest = {
        "revision": args.revision,
        "build_command": args.command,
        "created": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "spec": "sweeps/nightly-gpu.json",
        "mutants": mutants,
    }
    with open(args.out, "w", encoding="utf-8") as out:
        json.dump(manifest, out, indent=2)
        out.write("\n")
    return 0


def load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def union_filters(manifest):
    union = {"ops": [], "impls": [], "passes": []}
    for mutant in manifest["mutants"]:
        for key, values in union.items():
            values += [v for v in mutant["sweep"][key] if v not in values]
    return union


def cmd_filters(args):
    union = union_filters(load(args.manifest))
    print(" ".join(",".join(union[key]) for key in ("ops", "impls", "passes")))
    return 0


def cmd_select(args):
    for mutant in select(load(args.manifest)["mutants"], args.only):
        print(mutant["name"])
    return 0


def cmd_field(args):
    for mutant in load(args.manifest)["mutants"]:
        if mutant["name"] == args.name:
            value = {"sweep-ops": mutant["op_filter"], "sweep-impls": mutant["impl_filter"],
                     "sweep-passes": mutant["pass_filter"], "binary": mutant["binary"]}[args.key]
            print(value)
            return 0
    raise SystemExit(f"mutation-test: no mutant {args.name} in {args.manifest}")


def invariant(case):
    return not case.get("control") and not case.get("observation")


def first_finding(case):
    """The first drift (else nondeterminism) finding of a case: layout, tensor and metrics."""
    for key in ("drift", "nondeterminism"):
        for finding in case.get(key) or []:
            kept = {k: finding.get(k) for k in ("layout", "reference_layout", "tensor", "dtype",
                                                "mismatch_count", "max_ulp_distance", "max_abs_diff")}
            if finding.get("first_mismatch"):
                kept["first_mismatch"] = finding["first_mismatch"]
            return kept
    for accuracy in case.get("accuracy") or []:
        if not accuracy.get("pass", True):
            return {"layout": "accuracy", "tensor": accuracy.get("tensor")}
    return None


def cmd_summarize(args):
    result = {"name": args.name, "exit_code": args.exit_code, "seconds": args.seconds,
              "timed_out": args.timed_out, "command": args.command, "report": False}
    if os.path.exists(args.report):
        report = load(args.report)
        cases = report.get("results", [])
        summary = report.get("summary", {})
        result.update({
            "report": True,
            "interrupted": bool(report.get("meta", {}).get("interrupted")),
            "cases": len(cases),
            "verdicts": summary.get("verdicts", {}),
            "device": report.get("meta", {}).get("cuda", {}).get("gpu_name"),
            "invariant_verdicts": {c["id"]: c["verdict"] for c in cases if invariant(c)},
        })
        failing = [c for c in cases if invariant(c) and c["verdict"] in FAILING + ("error",)]
        result["failing"] = [{"id": c["id"], "op": c["op"], "impl": c["impl"], "dtype": c["dtype"],
                              "pass": c["pass"], "verdict": c["verdict"]} for c in failing]
        for entry, case in list(zip(result["failing"], failing))[:DETAILS_KEPT]:
            entry["finding"] = first_finding(case)
            if case.get("reason"):
                entry["reason"] = case["reason"][:300]
            if case.get("chain"):
                chain = case["chain"]
                entry["chain_first_failing"] = chain.get("first_failing_forward") or chain.get(
                    "first_failing_backward")
    with open(args.out, "w", encoding="utf-8") as out:
        json.dump(result, out, indent=1)
        out.write("\n")
    return 0


# ---- judging and the report ---------------------------------------------------------------------

def judge(mutant, result, baseline):
    """What a mutant's run says, against the baseline's verdicts of the same cases."""
    if result is None:
        return {"status": "not run"}
    if not result.get("report"):
        return {"status": "no report", "detail": f"exit {result.get('exit_code')}"}
    failing = [f for f in result.get("failing", []) if f["verdict"] in FAILING]
    errors = [f for f in result.get("failing", []) if f["verdict"] == "error"]
    confirmed = [f for f in failing if baseline.get(f["id"]) == "pass"]
    unverified = [f for f in failing if f["id"] not in baseline]
    also_in_baseline = [f for f in failing if f["id"] in baseline and baseline[f["id"]] != "pass"]
    verdict = {"failing": len(failing), "confirmed": len(confirmed), "unverified": len(unverified),
               "baseline_failing": len(also_in_baseline), "errors": len(errors)}
    if confirmed:
        expect = mutant["expect"]
        ranked = sorted(confirmed, key=lambda f: (f["op"] != expect["op"], f["verdict"] != "drift",
                                                  "finding" not in f))
        verdict.update(status="flagged", first=ranked[0])
    elif unverified:
        verdict.update(status="unverified", first=unverified[0])
    elif result.get("timed_out") or result.get("interrupted"):
        verdict["status"] = "not flagged (timed out)"
    else:
        verdict["status"] = "not flagged"
    return verdict


def baseline_verdicts(path):
    """Verdicts by case id from a baseline result.json or a compact nightly summary
    (scripts/compact-report.py: "cases": [[id, verdict, fingerprint, ...], ...])."""
    data = load(path)
    if "invariant_verdicts" in data:
        return data["invariant_verdicts"]
    if isinstance(data.get("cases"), list):
        return {case[0]: case[1] for case in data["cases"]}
    if isinstance(data.get("results"), list):
        return {case["id"]: case["verdict"] for case in data["results"]}
    raise SystemExit(f"mutation-test: {path} holds no case verdicts")


def merged_runs(dirs, baseline_file=None):
    manifest, results, baseline, runs = None, {}, {}, []
    if baseline_file:
        baseline.update(baseline_verdicts(baseline_file))
        results["baseline_file"] = baseline_file
    for directory in dirs:
        path = os.path.join(directory, "manifest.json")
        if os.path.exists(path):
            # Runs of several builds: the union of their mutants, a later build's entry replacing
            # an earlier one of the same name (a patch refreshed for a newer tree).
            loaded = load(path)
            for mutant in loaded["mutants"]:
                mutant["revision"] = loaded.get("revision", "?")
            if manifest is None:
                manifest = loaded
            else:
                names = [m["name"] for m in loaded["mutants"]]
                kept = [m for m in manifest["mutants"] if m["name"] not in names]
                manifest["mutants"] = sorted(kept + loaded["mutants"], key=lambda m: m["name"])
                manifest.setdefault("builds", [manifest.get("build_command", "?")])
                manifest["builds"].append(loaded.get("build_command", "?"))
        if os.path.exists(os.path.join(directory, "run.json")):
            runs.append(load(os.path.join(directory, "run.json")))
        base = os.path.join(directory, "baseline", "result.json")
        if os.path.exists(base):
            baseline.update(load(base).get("invariant_verdicts", {}))
            results.setdefault("baseline", load(base))
        mutants_dir = os.path.join(directory, "mutants")
        if os.path.isdir(mutants_dir):
            for name in sorted(os.listdir(mutants_dir)):
                path = os.path.join(mutants_dir, name, "result.json")
                if os.path.exists(path):
                    results[name] = load(path)
    if manifest is None:
        raise SystemExit("mutation-test: no manifest.json in " + ", ".join(dirs))
    return manifest, results, baseline, runs


def cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def render(manifest, results, baseline, runs):
    rows, judged = [], []
    for mutant in manifest["mutants"]:
        verdict = judge(mutant, results.get(mutant["name"]), baseline)
        judged.append((mutant, verdict))
    ran = [(m, v) for m, v in judged if v["status"] not in ("not run", "no report")]
    flagged = [m for m, v in judged if v["status"] == "flagged"]
    lines = ["# Mutation testing: planted batch-variance bugs against the nightly", ""]
    total = len(manifest["mutants"])
    specs = sorted({r.get("spec", "") for r in runs if r.get("spec")}) or [manifest.get("spec", "")]
    lines.append(f"**Mutation score: {len(flagged)}/{total}** planted bugs flagged by "
                 f"`{', '.join(specs)}` "
                 f"({len(ran)} of {total} run; a mutant counts as flagged when one of its invariant "
                 "impl's cases comes out drift, nondeterministic or inaccurate and the unmutated "
                 "binary passes that same case).")
    lines.append("")
    devices = sorted({r.get("device", "?") for r in runs}) or ["?"]
    dates = sorted({r.get("date", "?") for r in runs}) or ["?"]
    lines.append(f"- device: {', '.join(devices)}")
    lines.append(f"- date: {', '.join(dates)}")
    trees = {}
    for mutant in manifest["mutants"]:
        trees.setdefault(mutant.get("revision", manifest.get("revision", "?")), []).append(
            mutant["name"][:2])
    if len(trees) == 1:
        lines.append(f"- git commit of the mutated tree: `{next(iter(trees))}` "
                     f"(manifest written {manifest.get('created', '?')})")
    else:
        lines.append("- git commits of the mutated trees: " + "; ".join(
            f"`{tree}` (mutants {', '.join(names)})" for tree, names in trees.items()))
    base = results.get("baseline")
    if results.get("baseline_file"):
        lines.append(f"- baseline verdicts read from `{results['baseline_file']}` (--baseline: the "
                     "unmutated binary's run of the same spec, to be of the mutated tree's kernels)")
    if base and base.get("report"):
        failing = [f for f in base.get("failing", [])]
        lines.append(f"- baseline (unmutated binary, the union of the mutants' filters): "
                     f"{len(base.get('invariant_verdicts', {}))} invariant cases, "
                     f"{len(failing)} not passing, {base.get('seconds', '?')} s"
                     + (" (timed out)" if base.get("timed_out") else ""))
        for f in failing[:10]:
            lines.append(f"  - `{f['id']}`: {f['verdict']}")
    elif not results.get("baseline_file"):
        lines.append("- baseline: not run (no mutant can be confirmed against it)")
    lines.append("- commands:")
    for build in manifest.get("builds", [manifest.get("build_command", "?")]):
        lines.append(f"  - build: `{build}`")
    for run in runs:
        lines.append(f"  - run ({run.get('device', '?')}): `{run.get('command', '?')}`")
    baseline_flag = f"--baseline {results['baseline_file']} " if results.get("baseline_file") else ""
    lines.append(f"  - report: `scripts/mutation-test.sh report {baseline_flag}RUN_DIR... "
                 "reports/mutation.md`")
    lines.append("")
    lines.append("| mutant | path | expected op / pass / tensor | flagged | first finding: case, layout, tensor "
                 "| failing cases | sweep filter | time |")
    lines.append("|---|---|---|---|---|---|---|---|")
    for mutant, verdict in judged:
        expect = mutant["expect"]
        result = results.get(mutant["name"]) or {}
        first = verdict.get("first")
        if first:
            finding = first.get("finding") or {}
            where = f"`{first['id']}` {first['verdict']}"
            if finding:
                where += f", layout `{finding.get('layout')}`, tensor `{finding.get('tensor')}`"
                if finding.get("max_ulp_distance") is not None:
                    where += f" ({finding.get('mismatch_count')} differing, max {finding.get('max_ulp_distance')} ulp)"
            if first.get("chain_first_failing"):
                where += f", chain's first failing op: {json.dumps(first['chain_first_failing'])}"
        else:
            where = verdict.get("detail", "")
        counts = ""
        if "failing" in verdict:
            counts = f"{verdict['confirmed']}"
            extra = []
            if verdict["baseline_failing"]:
                extra.append(f"{verdict['baseline_failing']} fail in the baseline too")
            if verdict["unverified"]:
                extra.append(f"{verdict['unverified']} not in the baseline")
            if verdict["errors"]:
                extra.append(f"{verdict['errors']} error")
            if extra:
                counts += " (" + "; ".join(extra) + ")"
        seconds = result.get("seconds")
        lines.append("| " + " | ".join(cell(x) for x in [
            mutant["name"],
            f"`{mutant['path']}`: {mutant['path_description']}",
            f"{expect['op']} / {expect['pass']} / {expect['tensor']}",
            "**yes**" if verdict["status"] == "flagged" else verdict["status"],
            where,
            counts,
            f"`--op {mutant['op_filter']} --impl {mutant['impl_filter']} --pass {mutant['pass_filter']}`",
            f"{seconds} s" if seconds is not None else "",
        ]) + " |")
    missed = [(m, v) for m, v in judged if v["status"] != "flagged"]
    if missed:
        lines += ["", "## Not flagged", ""]
        for mutant, verdict in missed:
            lines.append(f"- **{mutant['name']}** ({verdict['status']}): `{mutant['path']}`. "
                         f"{mutant['why']}")
    lines.append("")
    return "\n".join(lines), len(flagged), total


def cmd_report(args):
    dirs, out = list(args.dirs), args.out
    if out is None and len(dirs) > 1 and dirs[-1].endswith(".md"):
        out = dirs.pop()
    manifest, results, baseline, runs = merged_runs(dirs, args.baseline)
    text, flagged, total = render(manifest, results, baseline, runs)
    if out:
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        with open(out, "w", encoding="utf-8") as f:
            f.write(text)
    print(f"mutation score: {flagged}/{total}" + (f" (written to {out})" if out else ""))
    if not out:
        print(text)
    return 0


# ---- self-test -----------------------------------------------------------------------------------

def cmd_selftest(_):
    """Judging on made-up runs: a confirmed drift flags, a case failing in the baseline too does
    not, a case the baseline never ran is 'unverified', a clean run is 'not flagged'."""
    def mutant(name, op):
        return {"name": name, "path": "p", "path_description": "d", "why": "w",
                "expect": {"op": op, "pass": "forward", "tensor": "y", "impl": "fixed-order"},
                "sweep": {"ops": [op], "impls": ["fixed-order"], "passes": ["forward"]},
                "op_filter": op, "impl_filter": "fixed-order", "pass_filter": "forward",
                "binary": f"mutants/{name}/bitcheck"}

    def result(name, failing, verdicts):
        return {"name": name, "report": True, "exit_code": 1 if failing else 0, "seconds": 1.0,
                "timed_out": False, "invariant_verdicts": verdicts, "failing": failing}

    drift = {"id": "matmul/fixed-order/bf16/forward/K=8,N=8/M=33/seed=1", "op": "matmul",
             "impl": "fixed-order", "dtype": "bf16", "pass": "forward", "verdict": "drift",
             "finding": {"layout": "batch", "tensor": "y", "mismatch_count": 3, "max_ulp_distance": 1}}
    old = dict(drift, id="rope/fixed-order/bf16/forward/x/M=3/seed=1", op="rope")
    new = dict(drift, id="silu/fixed-order/fp32/forward/H=5/M=3/seed=1", op="silu")
    manifest = {"revision": "abc", "created": "now", "spec": "s.json",
                "mutants": [mutant("01-a", "matmul"), mutant("02-b", "rope"), mutant("03-c", "silu"),
                            mutant("04-d", "embedding"), mutant("05-e", "logprob")]}
    baseline_verdicts = {drift["id"]: "pass", old["id"]: "drift"}
    with tempfile.TemporaryDirectory() as tmp:
        json.dump(manifest, open(os.path.join(tmp, "manifest.json"), "w"))
        json.dump({"device": "made up", "date": "today", "command": "run"},
                  open(os.path.join(tmp, "run.json"), "w"))
        os.makedirs(os.path.join(tmp, "baseline"))
        json.dump(result("baseline", [dict(old)], baseline_verdicts),
                  open(os.path.join(tmp, "baseline", "result.json"), "w"))
        for name, failing in [("01-a", [drift]), ("02-b", [old]), ("03-c", [new]), ("04-d", [])]:
            os.makedirs(os.path.join(tmp, "mutants", name))
            json.dump(result(name, failing, {}), open(os.path.join(tmp, "mutants", name, "result.json"), "w"))
        manifest_, results, baseline, runs = merged_runs([tmp])
        statuses = {m["name"]: judge(m, results.get(m["name"]), baseline)["status"]
                    for m in manifest_["mutants"]}
        expected = {"01-a": "flagged", "02-b": "not flagged", "03-c": "unverified",
                    "04-d": "not flagged", "05-e": "not run"}
        text, flagged, total = render(manifest_, results, baseline, runs)
    problems = [f"{name}: {statuses[name]}, expected {want}" for name, want in expected.items()
                if statuses[name] != want]
    for needle in ["**Mutation score: 1/5**", "layout `batch`, tensor `y`", "| 01-a |", "## Not flagged",
                   "1 fail in the baseline too", "device: made up"]:
        if needle not in text:
            problems.append(f"the report lacks {needle!r}")
    if (flagged, total) != (1, 5):
        problems.append(f"score {flagged}/{total}, expected 1/5")
    for problem in problems:
        print("selftest:", problem)
    print("mutation-test selftest: " + ("1 passed, 0 failed" if not problems else "0 passed, 1 failed"))
    return 1 if problems else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    root_default = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p = sub.add_parser("check")
    p.add_argument("--root", default=root_default)
    p.add_argument("--bitcheck")
    p.set_defaults(run=cmd_check)
    p = sub.add_parser("manifest")
    p.add_argument("--root", default=root_default)
    p.add_argument("--out", required=True)
    p.add_argument("--only", default="")
    p.add_argument("--revision", default="unknown")
    p.add_argument("--command", default="scripts/mutation-test.sh build")
    p.set_defaults(run=cmd_manifest)
    p = sub.add_parser("filters")
    p.add_argument("manifest")
    p.set_defaults(run=cmd_filters)
    p = sub.add_parser("select")
    p.add_argument("manifest")
    p.add_argument("--only", default="")
    p.set_defaults(run=cmd_select)
    p = sub.add_parser("field")
    p.add_argument("manifest")
    p.add_argument("name")
    p.add_argument("key", choices=["sweep-ops", "sweep-impls", "sweep-passes", "binary"])
    p.set_defaults(run=cmd_field)
    p = sub.add_parser("summarize")
    p.add_argument("report")
    p.add_argument("--out", required=True)
    p.add_argument("--name", default="")
    p.add_argument("--exit-code", type=int, default=None)
    p.add_argument("--seconds", type=int, default=None)
    p.add_argument("--timed-out", action="store_true")
    p.add_argument("--command", default="")
    p.set_defaults(run=cmd_summarize)
    p = sub.add_parser("report")
    p.add_argument("dirs", nargs="+")
    p.add_argument("--out")
    p.add_argument("--baseline", help="verdicts of the unmutated tree from a result.json, a report or a "
                   "compact nightly summary, where a run has no baseline/ of its own")
    p.set_defaults(run=cmd_report)
    p = sub.add_parser("selftest")
    p.set_defaults(run=cmd_selftest)
    args = parser.parse_args()
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
