#!/usr/bin/env python3
"""Compares the compiled device code of two sets of CUDA objects, kernel by kernel: proves that a
change of the sources (a file split, code moved into a header) left every kernel's instructions as
they were. Python 3 standard library, with binutils' c++filt and, for compressed PTX, zstd.

  check-same-sass.py [--ptx] [--quiet] OLD NEW
  check-same-sass.py selftest NVCC

OLD and NEW are object files (.o of nvcc -c) or folders searched for them. From each object's
fatbin it takes every cubin (SASS) and, with --ptx, every PTX text, and splits them by function:
  SASS  a kernel's machine code is the bytes of its .text section (its instructions and their
        control codes, what cuobjdump -sass prints, compared as bits, and the subroutines ptxas
        placed after it, such as a 64-bit division), with the section's flags, its symbols and
        relocations, its static shared and parameter memory, and its .nv.info attributes
        (registers, stack, parameters, exit offsets); symbol indices, which depend on what else
        the file holds, are compared by the names they point at, and the module's numbers in
        subroutine names ($__internal_12_$...) are taken out;
  PTX   a function's text with .loc/.file lines dropped, mangled names demangled and the module's
        function numbers in labels taken out.
Functions are keyed by architecture and demangled name, so one that only moved to another file
(its anonymous namespace renamed with it) keeps its key. Functions found on one side only are
paired when their names agree once `(anonymous namespace)::` is removed: a symbol renamed by the
move (a parameter type taken out of an anonymous namespace, say), reported as `renamed`.

Prints a line per function, `same` or `differs` (with what differs), then `only-old` / `only-new`
for functions without a counterpart, and a summary line. Exit 0 when every function has its
counterpart and all are the same, 1 otherwise, 2 on bad usage or an unreadable object.

`selftest NVCC` compiles a small kernel file three ways (as is; under another file name with its
parameter type taken out of the anonymous namespace; with one operation changed) and checks that
the comparison says same (renamed) for the move and differs for the change: the check can fail.
"""
import os
import re
import struct
import subprocess
import sys
import tempfile

ANONYMOUS = "(anonymous namespace)::"


class BadInput(Exception):
    pass


# ---- ELF ------------------------------------------------------------------------------------------

class Elf:
    """The sections and symbols of a 64-bit little-endian ELF image (a host object or a cubin)."""

    def __init__(self, data, what):
        if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
            raise BadInput(f"{what}: not a 64-bit little-endian ELF file")
        self.data = data
        shoff, = struct.unpack_from("<Q", data, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
        self.sections = []
        for i in range(shnum):
            name, kind, flags, _, offset, size, link, info, _, entsize = struct.unpack_from(
                "<IIQQQQIIQQ", data, shoff + i * shentsize)
            self.sections.append({"name_offset": name, "type": kind, "flags": flags,
                                  "offset": offset, "size": size, "link": link, "info": info,
                                  "entsize": entsize})
        names = self.sections[shstrndx]
        for section in self.sections:
            section["name"] = self._string(names, section["name_offset"])
        self.by_name = {s["name"]: s for s in self.sections}
        self.symbols = []
        for section in self.sections:
            if section["type"] == 2:  # SHT_SYMTAB
                strings = self.sections[section["link"]]
                for at in range(section["offset"], section["offset"] + section["size"], 24):
                    name, info, _, shndx, value, size = struct.unpack_from("<IBBHQQ", data, at)
                    self.symbols.append({"name": self._string(strings, name), "type": info & 15,
                                         "section": shndx, "value": value, "size": size})

    def _string(self, section, offset):
        start = section["offset"] + offset
        return self.data[start:self.data.index(b"\0", start)].decode("utf-8", "replace")

    def content(self, section):
        if section["type"] == 8:  # SHT_NOBITS
            return b""
        return self.data[section["offset"]:section["offset"] + section["size"]]

    def symbol_name(self, index):
        if index < len(self.symbols):
            symbol = self.symbols[index]
            if symbol["name"]:
                return symbol["name"]
            if symbol["section"] < len(self.sections):
                return self.sections[symbol["section"]]["name"]
        return f"#{index}"


# ---- fatbin ---------------------------------------------------------------------------------------

FATBIN_MAGIC = 0xBA55ED50
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def zstd_decompress(payload, what):
    try:
        done = subprocess.run(["zstd", "-d", "-c", "-q"], input=payload, capture_output=True)
    except FileNotFoundError:
        raise BadInput(f"{what}: a compressed PTX entry, and no zstd to open it")
    if done.returncode != 0:
        raise BadInput(f"{what}: zstd cannot open a compressed entry: {done.stderr.decode().strip()}")
    return done.stdout


def fatbin_entries(data, what):
    """(kind, arch, payload) of every entry: kind 'sass' for a cubin, 'ptx' for PTX text."""
    entries, offset = [], 0
    while offset + 16 <= len(data):
        magic, _, header_size, fat_size = struct.unpack_from("<IHHQ", data, offset)
        if magic != FATBIN_MAGIC:
            if any(data[offset:]):
                raise BadInput(f"{what}: no fatbin header at byte {offset} of .nv_fatbin")
            break
        at, end = offset + header_size, offset + header_size + fat_size
        while at < end:
            kind, _, entry_header, size = struct.unpack_from("<HHIQ", data, at)
            compressed_size, = struct.unpack_from("<I", data, at + 16)
            arch, = struct.unpack_from("<I", data, at + 28)
            payload = data[at + entry_header:at + entry_header + size]
            if payload[:4] == ZSTD_MAGIC:
                payload = zstd_decompress(payload[:compressed_size or size], what)
            elif kind == 2 and payload[:4] != b"\x7fELF":
                raise BadInput(f"{what}: a cubin entry (sm_{arch}) in an unknown compression")
            if kind == 2:
                entries.append(("sass", f"SASS sm_{arch}", payload))
            elif kind == 1:
                entries.append(("ptx", f"PTX compute_{arch}", payload.rstrip(b"\0").decode()))
            at += entry_header + size
        offset = end
    return entries


# ---- names ----------------------------------------------------------------------------------------

def demangle(names):
    names = sorted(set(names))
    if not names:
        return {}
    try:
        done = subprocess.run(["c++filt"], input="\n".join(names) + "\n", capture_output=True,
                              text=True, check=True)
    except (FileNotFoundError, subprocess.CalledProcessError):
        raise BadInput("c++filt (binutils) is needed to demangle the kernels' names")
    return dict(zip(names, done.stdout.splitlines()))


MANGLED = re.compile(r"_Z[\w$]+")


def map_strings(parts, change):
    """`parts` (strings, bytes and numbers in lists, tuples and dicts) with every string s in it
    replaced by change(s)."""
    if isinstance(parts, str):
        return change(parts)
    if isinstance(parts, (list, tuple)):
        return type(parts)(map_strings(p, change) for p in parts)
    if isinstance(parts, dict):
        return {key: map_strings(value, change) for key, value in parts.items()}
    return parts


def own_name_out(parts, name):
    """`parts` with the function's own mangled name, wherever a string holds it, as <self>: a
    renamed function's references to itself (its parameter bank, its labels) stay the same."""
    own = re.compile(re.escape(name) + r"(?![\w$])")
    return map_strings(parts, lambda text: own.sub("<self>", text))


def mangled_in(parts):
    found = set()
    map_strings(parts, lambda text: found.update(MANGLED.findall(text)) or text)
    return found


def demangled_in(parts, names):
    return map_strings(parts, lambda text: MANGLED.sub(lambda m: names.get(m.group(0), m.group(0)),
                                                       text))


# ---- SASS -----------------------------------------------------------------------------------------

def nv_info_entries(data):
    """(format, attribute, value bytes) of an .nv.info section."""
    entries, at = [], 0
    while at + 4 <= len(data):
        form, attribute, value = data[at], data[at + 1], struct.unpack_from("<H", data, at + 2)[0]
        if form == 4:  # a sized value
            entries.append((form, attribute, data[at + 4:at + 4 + value]))
            at += 4 + value
        else:
            entries.append((form, attribute, data[at + 2:at + 4]))
            at += 4
    return entries


PARAM_CBANK = 0x0A  # .nv.info attribute: the kernel's parameter bank, by its symbol's index


INTERNAL = re.compile(r"\$__internal_\d+_\$")  # a module-numbered subroutine (__cuda_sm20_div_s64)


def section_symbol(elf, index):
    """A symbol's name, a subroutine's module number taken out."""
    return INTERNAL.sub("$__internal_$", elf.symbol_name(index))


def sass_functions(cubin, what):
    """Function name -> the parts of its compiled form that a change of the source could alter.
    A function is a .text section: the kernel and the subroutines ptxas placed after it."""
    elf = Elf(cubin, what)
    functions, owner = {}, {}
    for section_index, text in enumerate(elf.sections):
        if not text["name"].startswith(".text."):
            continue
        name = text["name"][len(".text."):]
        members = [(symbol["value"], symbol["size"], section_symbol(elf, i))
                   for i, symbol in enumerate(elf.symbols)
                   if symbol["type"] == 2 and symbol["section"] == section_index]
        for i, symbol in enumerate(elf.symbols):
            if symbol["section"] == section_index:
                owner[i] = name
        parts = {"instructions": elf.content(text), "flags": text["flags"],
                 "functions": sorted(members)}
        for kind in (".rel", ".rela"):
            section = elf.by_name.get(kind + text["name"])
            if section:
                step = 24 if kind == ".rela" else 16
                relocations = []
                for at in range(0, section["size"], step):
                    fields = struct.unpack_from("<QQq" if step == 24 else "<QQ",
                                                elf.data, section["offset"] + at)
                    relocations.append((fields[0], fields[1] & 0xFFFFFFFF,
                                        section_symbol(elf, fields[1] >> 32), fields[2:]))
                parts["relocations"] = relocations
        for prefix in (".nv.shared.", ".nv.constant0.", ".nv.local."):
            section = elf.by_name.get(prefix + name)
            if section:
                parts[prefix.strip(".") + " bytes"] = section["size"]
        own = elf.by_name.get(".nv.info." + name)
        if own:
            attributes = []
            for form, attribute, value in nv_info_entries(elf.content(own)):
                if attribute == PARAM_CBANK and len(value) >= 4:
                    value = (section_symbol(elf, struct.unpack_from("<I", value)[0]), value[4:])
                attributes.append((form, attribute, value))
            parts["attributes"] = attributes
        functions[name] = parts
    # The module's .nv.info: sized attributes whose first word is the index of a symbol of a
    # function's section (the kernel's register count, a subroutine's stack size).
    shared_info = elf.by_name.get(".nv.info")
    if shared_info:
        for form, attribute, value in nv_info_entries(elf.content(shared_info)):
            if form != 4 or len(value) < 4:
                continue
            index = struct.unpack_from("<I", value)[0]
            if index in owner:
                functions[owner[index]].setdefault("module attributes", []).append(
                    (attribute, section_symbol(elf, index), value[4:]))
    return {name: own_name_out(parts, name) for name, parts in functions.items()}


# ---- PTX ------------------------------------------------------------------------------------------

PTX_FUNCTION = re.compile(r"^(?:\.(?:visible|weak|extern)\s+)*\.(?:entry|func)\s+(?:\([^)]*\)\s*)?"
                          r"([A-Za-z_$][\w$]*)")


def ptx_functions(text):
    """Function name -> its normalized text (declarations without a body are left out)."""
    functions, lines, name, depth = {}, [], None, 0
    for line in text.splitlines():
        stripped = line.strip()
        if name is None:
            match = PTX_FUNCTION.match(stripped)
            if match:
                name, lines, depth = match.group(1), [], 0
            else:
                continue
        if stripped.startswith(".loc") or stripped.startswith(".file"):
            continue
        lines.append(stripped)
        depth += stripped.count("{") - stripped.count("}")
        if stripped.endswith(";") and depth == 0 and "{" not in "".join(lines):
            name = None  # a declaration
        elif depth == 0 and "{" in "".join(lines) and stripped.endswith("}"):
            functions[name] = lines
            name = None
    return functions


def unparameter(text):
    """A parameter's name (the function's mangled name + _param_N) as param_N."""
    return re.sub(r"_Z[\w$]+_param_(\d+)", r"param_\1", text)


def normalize_ptx(name, lines, names):
    text = own_name_out(unparameter("\n".join(lines)), name)
    # Numbered in the module: a function's labels and its local memory depot.
    text = re.sub(r"\$L__BB\d+_", "$L__BB_", text)
    text = re.sub(r"\$L__tmp\d+", "$L__tmp", text)
    text = re.sub(r"__local_depot\d+", "__local_depot", text)
    return demangled_in(text, names)


# ---- comparison -----------------------------------------------------------------------------------

def objects_of(path):
    if os.path.isfile(path):
        return [path]
    if not os.path.isdir(path):
        raise BadInput(f"{path}: no such object file or folder")
    found = sorted(os.path.join(folder, f) for folder, _, files in os.walk(path)
                   for f in files if f.endswith(".o"))
    if not found:
        raise BadInput(f"{path}: no .o file in it")
    return found


def collect(path, with_ptx):
    """(arch, demangled name) -> (object, compared parts) over every object under `path`."""
    raw = []
    for obj in objects_of(path):
        with open(obj, "rb") as f:
            host = Elf(f.read(), obj)
        section = host.by_name.get(".nv_fatbin")
        if section is None:
            continue  # host code only
        for kind, arch, payload in fatbin_entries(host.content(section), obj):
            if kind == "sass":
                for name, parts in sass_functions(payload, f"{obj} ({arch})").items():
                    raw.append((arch, name, obj, parts))
            elif with_ptx:
                functions = ptx_functions(payload)
                mangled = mangled_in(unparameter(payload))
                raw.append((arch, None, obj, (functions, mangled)))
    names = demangle([name for _, name, _, _ in raw if name] +
                     [m for _, name, _, parts in raw for m in (parts[1] if name is None
                                                               else mangled_in(parts))])
    result = {}
    for arch, name, obj, parts in raw:
        if name is None:  # a PTX module
            for function, lines in parts[0].items():
                key = (arch, names.get(function, function))
                add(result, key, obj, normalize_ptx(function, lines, names))
        else:
            add(result, (arch, names.get(name, name)), obj, demangled_in(parts, names))
    return result


def add(result, key, obj, parts):
    if key in result and result[key][1] != parts:
        # The same name compiled twice (an inline function in two objects) with other code.
        result[key] = (result[key][0] + ", " + obj, {"conflict": True})
    else:
        result.setdefault(key, (obj, parts))


def difference(old, new):
    if old == new:
        return ""
    if isinstance(old, str):
        return "text"
    return ", ".join(key for key in sorted(set(old) | set(new)) if old.get(key) != new.get(key))


def plain(key):
    """A function's key with its anonymous namespaces taken out (for pairing renamed symbols)."""
    return key[0], key[1].replace(ANONYMOUS, "")


def compare(old_path, new_path, with_ptx, quiet):
    old, new = collect(old_path, with_ptx), collect(new_path, with_ptx)
    same = differs = 0
    rows = []
    paired = [(key, key) for key in sorted(old) if key in new]
    old_only = [key for key in sorted(old) if key not in new]
    new_only = [key for key in sorted(new) if key not in old]
    new_by_plain = {}
    for key in new_only:
        new_by_plain.setdefault(plain(key), []).append(key)
    for key in list(old_only):
        candidates = new_by_plain.get(plain(key), [])
        if len(candidates) == 1:
            paired.append((key, candidates[0]))
            old_only.remove(key)
            new_only.remove(candidates[0])
    for old_key, new_key in paired:
        what = difference(old[old_key][1], new[new_key][1])
        renamed = "" if old_key == new_key else f" (renamed: {new_key[1]})"
        if what:
            differs += 1
            rows.append(f"differs  {old_key[0]}  {old_key[1]}{renamed}  [{what}]")
        else:
            same += 1
            if not quiet or renamed:
                rows.append(f"same     {old_key[0]}  {old_key[1]}{renamed}")
    rows += [f"only-old {key[0]}  {key[1]}  ({old[key][0]})" for key in old_only]
    rows += [f"only-new {key[0]}  {key[1]}  ({new[key][0]})" for key in new_only]
    for row in rows:
        print(row)
    kinds = {kind: sum(1 for key, _ in paired if key[0].startswith(kind)) for kind in ("SASS", "PTX")}
    print(f"check-same-sass: {same + differs} functions compared ({kinds['SASS']} SASS, "
          f"{kinds['PTX']} PTX): {same} same, {differs} differ; {len(old_only)} only in OLD, "
          f"{len(new_only)} only in NEW")
    return 0 if differs == 0 and not old_only and not new_only else 1


# ---- selftest -------------------------------------------------------------------------------------

SELFTEST_SOURCE = r"""
%(outside)s
namespace {
%(inside)s
template <int N>
__global__ void scale_kernel(float* x, Params p) { x[threadIdx.x] = x[threadIdx.x] %(op)s p.scale * N; }
__global__ void add_kernel(float* x) { x[threadIdx.x] += 1.0f; }
}  // namespace
void launch(float* x) {
  scale_kernel<3><<<1, 32>>>(x, {2.0f});
  add_kernel<<<1, 32>>>(x);
}
"""
PARAMS = "struct Params { float scale; };"


def selftest(nvcc):
    # (file, Params declared outside the anonymous namespace, operator)
    variants = {"old": ("kernels", False, "*"), "moved": ("other_file", True, "*"),
                "changed": ("kernels", False, "+")}
    with tempfile.TemporaryDirectory() as folder:
        for variant, (file, outside, op) in variants.items():
            os.makedirs(os.path.join(folder, variant))
            source = os.path.join(folder, variant, file + ".cu")
            with open(source, "w") as f:
                f.write(SELFTEST_SOURCE % {"outside": PARAMS if outside else "",
                                           "inside": "" if outside else PARAMS, "op": op})
            subprocess.run([nvcc, "-c", source, "-o", source + ".o", "-O3",
                            "--generate-code=arch=compute_90a,code=sm_90a",
                            "--generate-code=arch=compute_80,code=compute_80"], check=True)
        expected = {"moved": 0, "changed": 1}
        failures = 0
        for variant, code in expected.items():
            print(f"-- {variant}:")
            got = compare(os.path.join(folder, "old"), os.path.join(folder, variant), True, False)
            if got != code:
                print(f"check-same-sass selftest: {variant} gave exit {got}, expected {code}")
                failures += 1
    print(f"check-same-sass selftest: {len(expected) - failures} passed, {failures} failed")
    return 1 if failures else 0


def main(argv):
    args = [a for a in argv if not a.startswith("--")]
    flags = [a for a in argv if a.startswith("--")]
    unknown = [f for f in flags if f not in ("--ptx", "--quiet")]
    if args[:1] == ["selftest"] and len(args) == 2 and not flags:
        return selftest(args[1])
    if len(args) != 2 or unknown:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    try:
        return compare(args[0], args[1], "--ptx" in flags, "--quiet" in flags)
    except BadInput as error:
        print(f"check-same-sass: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
