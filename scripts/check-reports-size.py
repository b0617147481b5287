#!/usr/bin/env python3
"""reports/ stays small: no file over 1 MB, the folder under 5 MB (the files' own sizes, as git
stores them; `du` counts filesystem blocks and reads about 10 % more). Exit 1 naming what is over,
with the largest files, so that a superseded run is what goes.
  scripts/check-reports-size.py [--dir reports] [--max-file BYTES] [--max-total BYTES]"""
import argparse
import os
import sys


def main():
    parser = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument("--dir", default=os.path.join(here, "..", "reports"))
    parser.add_argument("--max-file", type=int, default=1_000_000)
    parser.add_argument("--max-total", type=int, default=5_000_000)
    args = parser.parse_args()
    if not os.path.isdir(args.dir):
        print(f"check-reports-size: {args.dir}: not a directory", file=sys.stderr)
        return 2
    sizes = []
    for root, _, files in os.walk(args.dir):
        for name in files:
            path = os.path.join(root, name)
            sizes.append((os.path.getsize(path), os.path.relpath(path, args.dir)))
    sizes.sort(reverse=True)
    total = sum(size for size, _ in sizes)
    problems = [f"{path}: {size} bytes, over the {args.max_file} a file may have"
                for size, path in sizes if size > args.max_file]
    if total > args.max_total:
        problems.append(f"{args.dir}: {total} bytes in {len(sizes)} files, over the {args.max_total} "
                        "the folder may have")
    if problems:
        print("check-reports-size: " + "\n  ".join(["FAILED"] + problems))
        print("largest files:", *[f"{size:>9} {path}" for size, path in sizes[:10]], sep="\n  ")
        return 1
    print(f"check-reports-size: {total} bytes in {len(sizes)} files (at most {args.max_total}); "
          f"the largest {sizes[0][0] if sizes else 0} (at most {args.max_file})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
