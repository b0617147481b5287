#!/usr/bin/env python3
"""SM clock and power per phase of a GPU run: nvidia-smi samples (OUT/smi.csv, written by
`nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active
--format=csv,noheader -lms 50`) and phase marks ("YYYY/MM/DD HH:MM:SS.mmm NAME-start|NAME-end", one a
line) in, a markdown table out: per phase the samples above a power floor (the card busy), their
median SM clock and power, and the share of them with the software power cap active (throttle
reason 0x4), the reasons seen. Used by scripts/gpu-power-trace.sh and scripts/gpu-attention-bench.sh.
  scripts/power-phases.py SMI_CSV[.gz] MARKS [--floor WATTS] [--title TEXT]
  scripts/power-phases.py selftest"""
import argparse
import datetime
import gzip
import os
import statistics
import sys
import tempfile

SOFTWARE_POWER_CAP = 0x4


def parse_time(day, clock):
    return datetime.datetime.strptime(day + " " + clock, "%Y/%m/%d %H:%M:%S.%f")


def lines_of(path):
    """The lines of a text file, gzip-compressed where the name ends in .gz."""
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as file:
        return file.read().splitlines()


def read_marks(path):
    """{phase: (start, end)} in the order the phases started; a phase without an end is left out."""
    starts, phases = {}, {}
    for line in lines_of(path):
        parts = line.split(maxsplit=2)
        if len(parts) < 3:
            continue
        when, name = parse_time(parts[0], parts[1]), parts[2].strip()
        if name.endswith("-start"):
            starts[name[:-6]] = when
        elif name.endswith("-end") and name[:-4] in starts:
            phases[name[:-4]] = (starts[name[:-4]], when)
    return {name: phases[name] for name in starts if name in phases}


def read_samples(path):
    """[(time, SM MHz, W, throttle reasons as an int)]; lines nvidia-smi could not fill are skipped."""
    samples = []
    for line in lines_of(path):
        fields = [x.strip() for x in line.split(",")]
        try:
            samples.append((parse_time(*fields[0].split(" ")), float(fields[1].split()[0]),
                            float(fields[2].split()[0]), int(fields[4], 16)))
        except (ValueError, IndexError):
            pass
    return samples


def table(samples, phases, floor):
    lines = [f"| phase | samples above {floor:.0f} W | median SM clock (MHz) | median power (W) | "
             "software power cap | throttle reasons seen |", "|---|---|---|---|---|---|"]
    for name, (start, end) in phases.items():
        busy = [x for x in samples if start <= x[0] <= end and x[2] > floor]
        if not busy:
            lines.append(f"| {name} | 0 | | | | |")
            continue
        capped = sum(1 for x in busy if x[3] & SOFTWARE_POWER_CAP)
        reasons = ", ".join(f"0x{r:x}" for r in sorted(set(x[3] for x in busy)))
        lines.append(f"| {name} | {len(busy)} | {statistics.median(x[1] for x in busy):.0f} | "
                     f"{statistics.median(x[2] for x in busy):.0f} | "
                     f"{100 * capped / len(busy):.0f} % of them | {reasons} |")
    return "\n".join(lines)


def selftest():
    base = datetime.datetime(2026, 11, 26, 12, 0, 0)
    stamp = lambda seconds: (base + datetime.timedelta(seconds=seconds)).strftime(
        "%Y/%m/%d %H:%M:%S.%f")[:-3]
    with tempfile.TemporaryDirectory() as tmp:
        smi, marks = os.path.join(tmp, "smi.csv"), os.path.join(tmp, "marks.txt")
        with open(smi, "w") as f:
            # Phase a (0-1 s): 1980 MHz at 400 W, no cap; phase b (2-3 s): about 1700 MHz at 690 W,
            # the power cap in 3 of 5 samples and a thermal slowdown (0x20, not the cap) in one; idle
            # samples at 80 W between; one line nvidia-smi left unfilled.
            for t, mhz, watts, reasons in [(0.1, 1980, 400, 0), (0.5, 1980, 420, 0), (0.9, 1960, 80, 0),
                                           (1.5, 1980, 80, 0), (2.1, 1700, 690, 4), (2.4, 1710, 688, 4),
                                           (2.7, 1690, 692, 4), (2.8, 1720, 670, 0x20),
                                           (2.9, 1750, 650, 0)]:
                f.write(f"{stamp(t)}, {mhz} MHz, {watts:.2f} W, 50, 0x{reasons:016x}\n")
            f.write(f"{stamp(2.95)}, [N/A], [N/A], 50, [N/A]\n")
        with open(marks, "w") as f:
            f.write(f"{stamp(0)} a-start\n{stamp(1)} a-end\n{stamp(2)} b-start\n{stamp(3)} b-end\n"
                    f"{stamp(4)} c-start\n")
        text = table(read_samples(smi), read_marks(marks), 250)
        with open(smi, "rb") as raw, gzip.open(smi + ".gz", "wb") as packed:
            packed.write(raw.read())
        if table(read_samples(smi + ".gz"), read_marks(marks), 250) != text:
            text += "\n(the gzip copy of the samples gave another table)"
    expect = ["| a | 2 | 1980 | 410 | 0 % of them | 0x0 |",
              "| b | 5 | 1710 | 688 | 60 % of them | 0x0, 0x4, 0x20 |"]
    missing = [e for e in expect if e not in text]
    if "| c |" in text or "gzip copy" in text:
        missing.append("a phase without an end must be left out, and a gzip copy read alike")
    if missing:
        print("power-phases selftest FAILED:", *missing, sep="\n  ")
        print(text)
        return 1
    print("power-phases selftest: ok")
    return 0


def main():
    if sys.argv[1:] == ["selftest"]:
        return selftest()
    parser = argparse.ArgumentParser()
    parser.add_argument("smi")
    parser.add_argument("marks")
    parser.add_argument("--floor", type=float, default=250.0,
                        help="samples at or below this many watts are idle and not counted")
    parser.add_argument("--title")
    args = parser.parse_args()
    for path in (args.smi, args.marks):
        if not os.path.isfile(path):
            print(f"power-phases: {path}: no such file", file=sys.stderr)
            return 2
    if args.title:
        print(f"{args.title}\n")
    print(table(read_samples(args.smi), read_marks(args.marks), args.floor))
    return 0


if __name__ == "__main__":
    sys.exit(main())
