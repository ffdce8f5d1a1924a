#!/usr/bin/env python3
"""Checks that no source file includes a layer above its own.

The layers come from the fenced ```layers block of ARCHITECTURE.md: one line per folder (or single file),
`NUMBER PATH`, optionally followed by `| ROOT: ALLOWED...` to say that files of PATH may include files under ROOT
only from the ALLOWED folders (views reach the engine only through engine/inspect). A file's layer is the one of
the longest PATH that contains it. Every quoted #include in engine/, app/, views/ and plugins/ is read; it fails
when
  - the included file's layer is above the including file's,
  - a file includes under a restricted ROOT outside its ALLOWED folders,
  - a file under engine/ includes Qt or ImGui (the engine links neither),
  - a file (or an included file) lies in no folder of the table (a new folder must be given its layer).
Exit status 0 when the tree is clean, 1 with one line per violation (file:line: why), 2 on a bad table.

    scripts/check_layers.py [--root DIR] [--table FILE]
"""
import argparse
import os
import re
import sys

CHECKED_ROOTS = ("engine", "app", "views", "plugins")
SOURCE_SUFFIXES = (".h", ".hpp", ".cpp", ".cc", ".inc")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*([<"])([^">]+)[">]')
ENGINE_FORBIDDEN_SYSTEM = re.compile(r"^(Q[A-Za-z]*|Qt[A-Za-z]*/.*|imgui.*|backends/imgui.*)$")


class TableError(Exception):
    pass


def read_table(path):
    """Returns ({path: layer}, {path: (root, [allowed])}) from the ```layers block of `path`."""
    try:
        text = open(path, encoding="utf-8").read()
    except OSError as e:
        raise TableError(f"{path}: {e.strerror}")
    m = re.search(r"^```layers[ \t]*\n(.*?)^```", text, re.S | re.M)
    if not m:
        raise TableError(f"{path}: no ```layers block")
    first_line = text[: m.start(1)].count("\n") + 1
    layers, rules = {}, {}
    for i, raw in enumerate(m.group(1).splitlines()):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        where = f"{path}:{first_line + i}"
        main, _, rule = line.partition("|")
        parts = main.split()
        if len(parts) != 2 or not parts[0].isdigit():
            raise TableError(f"{where}: expected 'LAYER PATH [| ROOT: ALLOWED...]', got '{raw.strip()}'")
        layer, folder = int(parts[0]), parts[1].rstrip("/")
        if folder in layers:
            raise TableError(f"{where}: {folder} is listed twice")
        layers[folder] = layer
        if rule.strip():
            root, colon, allowed = rule.partition(":")
            if not colon or not allowed.split():
                raise TableError(f"{where}: expected '| ROOT: ALLOWED...' after the path, got '|{rule}'")
            rules[folder] = (root.strip().rstrip("/"), [a.rstrip("/") for a in allowed.split()])
    if not layers:
        raise TableError(f"{path}: the ```layers block is empty")
    return layers, rules


def owner(path, table):
    """The longest table entry that is `path` or a folder containing it, else None."""
    best = None
    for folder in table:
        if path == folder or path.startswith(folder + "/"):
            if best is None or len(folder) > len(best):
                best = folder
    return best


def under(path, folder):
    return path == folder or path.startswith(folder + "/")


def source_files(root):
    for top in CHECKED_ROOTS:
        base = os.path.join(root, top)
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames.sort()
            for name in sorted(filenames):
                if name.endswith(SOURCE_SUFFIXES):
                    full = os.path.join(dirpath, name)
                    yield os.path.relpath(full, root).replace(os.sep, "/")


def resolve(include, including, root):
    """The repository path an #include "..." names, or None for a file outside the checked roots (a generated
    moc file, a header beside the file that does not exist in the tree)."""
    if include.split("/", 1)[0] in CHECKED_ROOTS:
        return include
    beside = os.path.normpath(os.path.join(os.path.dirname(including), include)).replace(os.sep, "/")
    if os.path.exists(os.path.join(root, beside)):
        return beside
    return None


def check(root, table_path):
    layers, rules = read_table(table_path)
    problems = []
    for src in source_files(root):
        src_owner = owner(src, layers)
        if src_owner is None:
            problems.append(f"{src}: its folder has no layer in {os.path.basename(table_path)}")
            continue
        src_layer = layers[src_owner]
        rule_folder = owner(src, rules)
        with open(os.path.join(root, src), encoding="utf-8", errors="replace") as f:
            for lineno, line in enumerate(f, 1):
                m = INCLUDE_RE.match(line)
                if not m:
                    continue
                kind, inc = m.groups()
                if kind == "<":
                    if under(src, "engine") and ENGINE_FORBIDDEN_SYSTEM.match(inc):
                        problems.append(f"{src}:{lineno}: includes <{inc}>: the engine uses no Qt or ImGui")
                    continue
                dst = resolve(inc, src, root)
                if dst is None:
                    continue
                dst_owner = owner(dst, layers)
                if dst_owner is None:
                    problems.append(f"{src}:{lineno}: includes {inc}, whose folder has no layer")
                    continue
                if layers[dst_owner] > src_layer:
                    problems.append(
                        f"{src}:{lineno}: includes {inc} (layer {layers[dst_owner]}, {dst_owner}) from layer "
                        f"{src_layer} ({src_owner}): a file may include only its own layer and those below")
                if rule_folder is not None:
                    rroot, allowed = rules[rule_folder]
                    if under(dst, rroot) and not any(under(dst, a) for a in allowed):
                        problems.append(f"{src}:{lineno}: includes {inc}: {rule_folder} reaches {rroot} only "
                                        f"through {', '.join(allowed)}")
    return problems


def main(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=os.path.dirname(here), help="the repository (default: this script's)")
    ap.add_argument("--table", help="the file with the ```layers block (default: ROOT/ARCHITECTURE.md)")
    args = ap.parse_args(argv)
    table = args.table or os.path.join(args.root, "ARCHITECTURE.md")
    try:
        problems = check(args.root, table)
    except TableError as e:
        print(f"check_layers: {e}", file=sys.stderr)
        return 2
    for p in problems:
        print(p)
    if problems:
        print(f"check_layers: {len(problems)} include(s) break the layers of {table}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
