#!/usr/bin/env python3
"""Checks that no #include runs back up a layer (docs/ARCHITECTURE.md, "Layers").

usage: scripts/check-layers.py [--root DIR] [--list]

Every C++/CUDA file of lib/, kernels/ and apps/ belongs to a room: a folder (lib/core,
kernels/matmul, apps/tuner, ...) or, for kernels/manifest.cpp and .h, the manifest. The rooms stand
in layers, bottom first. A file may include files of its own room and of rooms in lower layers,
nothing else: an op may include another op only where COMPOSES says it is built from it. Prints
each violation as FILE:LINE: ROOM includes TARGET (ROOM of a higher or the same layer) and exits 1
when there is one; --list prints every room's layer and the edges between rooms. Standard library
only; ctest runs it as `layers` (and `layers_bite` on a planted back edge).
"""
import argparse
import os
import re
import sys

# Bottom first. "kernels/*" is every op folder not named elsewhere.
LAYERS = [
    ["lib/core"],
    ["lib/spec", "lib/external"],
    ["lib/run"],
    ["lib/report"],
    ["lib/sweep"],
    ["kernels/common"],
    ["kernels/*"],
    ["kernels/testing"],
    ["kernels/chain"],
    ["kernels/manifest"],
    ["apps/tuner"],
    ["apps/bitcheck"],
]
# Ops built from other ops (a same-layer include that is allowed, one way only).
COMPOSES = {
    "kernels/lm_head": ["kernels/matmul"],
    "kernels/lm_head_logprob": ["kernels/lm_head", "kernels/logprob"],
    "kernels/add_rmsnorm": ["kernels/rmsnorm"],
    "kernels/moe": ["kernels/matmul"],
}
INCLUDE_ROOTS = ["lib", "kernels", "apps", "include"]
SOURCE = re.compile(r"\.(h|hpp|cpp|cu|cuh|c|in)$")
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def room_of(path):
    parts = path.split("/")
    if parts[0] == "include":
        return "include"
    if path in ("kernels/manifest.cpp", "kernels/manifest.h"):
        return "kernels/manifest"
    if len(parts) < 3:
        return "/".join(parts[:2])
    return "/".join(parts[:2])


def layer_of(room, op_rooms):
    if room == "include":
        return -1  # the plugin header: below everything
    for index, names in enumerate(LAYERS):
        if room in names:
            return index
    if room in op_rooms:
        return LAYERS.index(["kernels/*"])
    return None


def resolve(root, including, target):
    candidates = [os.path.join(os.path.dirname(including), target)]
    candidates += [os.path.join(base, target) for base in INCLUDE_ROOTS]
    for candidate in candidates:
        normal = os.path.normpath(candidate)
        if os.path.isfile(os.path.join(root, normal)):
            return normal
    return None


def sources(root):
    for top in ("lib", "kernels", "apps"):
        for folder, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if SOURCE.search(name):
                    yield os.path.relpath(os.path.join(folder, name), root)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=os.path.join(os.path.dirname(__file__), ".."))
    parser.add_argument("--list", action="store_true")
    args = parser.parse_args()
    root = os.path.normpath(args.root)
    files = sorted(sources(root))
    named = {name for names in LAYERS for name in names}
    op_rooms = {room_of(f) for f in files if f.startswith("kernels/")} - named
    violations, edges = [], set()
    for path in files:
        room = room_of(path)
        layer = layer_of(room, op_rooms)
        if layer is None:
            violations.append(f"{path}: room {room} is in no layer (scripts/check-layers.py LAYERS)")
            continue
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as source:
            for number, line in enumerate(source, 1):
                match = INCLUDE.match(line)
                if not match:
                    continue
                target = resolve(root, path, match.group(1))
                if target is None:
                    continue  # a generated or system header
                target_room = room_of(target)
                if target_room == room:
                    continue
                edges.add((room, target_room))
                target_layer = layer_of(target_room, op_rooms)
                allowed = target_layer is not None and (
                    target_layer < layer or target_room in COMPOSES.get(room, []))
                if not allowed:
                    violations.append(f"{path}:{number}: {room} (layer {layer}) includes {target} "
                                      f"({target_room}, layer {target_layer})")
    if args.list:
        for index, names in enumerate(LAYERS):
            shown = sorted(op_rooms) if names == ["kernels/*"] else names
            print(f"layer {index}: {' '.join(shown)}")
        for source_room, target_room in sorted(edges):
            print(f"  {source_room} -> {target_room}")
    for violation in violations:
        print(violation)
    print(f"check-layers: {len(files)} files, {len(edges)} edges between rooms, "
          f"{len(violations)} back edges")
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
