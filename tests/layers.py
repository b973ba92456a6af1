#!/usr/bin/env python3
"""The include test: every #include in src/, cli/ and include/dtrain/ against the layer table of
docs/ARCHITECTURE.md (its "Layer rules" section, read here, not copied).

A file may include headers of its own layer and of the layers below it: a public header
(include/dtrain/X.h) belongs to the layer whose folder holds X.c, or the one the rules name; a
private header (src/L/X.h, included as ../L/X.h, or from cli/ as ../src/L/X.h) only from its own
folder, unless the rules list it as L's interface to a layer above. An edge the rules list as still to remove is reported, not failed; any other edge
that breaks a rule fails, printed as file:line and the rule. Edges listed as still to remove that
no longer exist fail too, so the list only shrinks.

usage: tests/layers.py [ROOT]   (exit 0 when every edge holds)
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def read_rules(doc):
    """The three blocks of the doc's "Layer rules" section, each an indented block after a line
    naming it."""
    text = open(doc).read()
    start = text.find("## Layer rules")
    if start < 0:
        sys.exit(f"{doc}: no '## Layer rules' section")
    section = text[start:]
    end = section.find("\n## ", 5)
    section = section[:end] if end > 0 else section
    # A paragraph ending in ':' names the indented block after it (by its first line).
    blocks, current, paragraph = {}, None, None
    for line in section.splitlines():
        if line.startswith("    ") and current:
            blocks[current].append(line.strip())
        elif line.strip() and not line.startswith("    "):
            paragraph = paragraph or line.strip()
            current = None
            if line.rstrip().endswith(":"):
                current = paragraph.lower()
                blocks[current] = []
                paragraph = None
        elif not line.strip():
            paragraph = None if current is None else paragraph
    return blocks


def find_block(blocks, prefix, doc, required=True):
    for name, lines in blocks.items():
        if name.startswith(prefix):
            return lines
    if not required:  # a list that may be empty, and then goes
        return []
    sys.exit(f"{doc}: the Layer rules section has no block '{prefix}...:'")


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    doc = os.path.join(root, "docs", "ARCHITECTURE.md")
    blocks = read_rules(doc)
    rank = {}
    for i, line in enumerate(find_block(blocks, "layers, top to bottom", doc)):
        for layer in line.split():
            rank[layer] = i
    owners = {}
    for line in find_block(blocks, "public headers without", doc):
        header, layer = line.split()
        owners[header] = layer
    interfaces = {}
    for line in find_block(blocks, "private headers", doc):
        header, layers = line.split(":")
        interfaces[header.strip()] = set(layers.split())
    debt = set()
    for line in find_block(blocks, "edges still to remove", doc, required=False):
        path, header = line.split()
        debt.add((path, header))

    for d in sorted(os.listdir(os.path.join(root, "src"))):
        for f in os.listdir(os.path.join(root, "src", d)):
            if f.endswith(".c"):
                owners.setdefault(f[:-2] + ".h", d)
    errors, seen_debt, unknown = [], set(), []

    def check(path, layer, line_no, inc, target, private):
        where = f"{path}:{line_no}"
        if target not in rank:
            unknown.append(f"{where}: {inc}: no layer owns it (add a line to 'Public headers "
                           f"without a .c of their name')")
            return
        key = inc[3:] if private else inc
        if (path, key) in debt:
            seen_debt.add((path, key))
            return
        if rank[target] < rank[layer]:
            errors.append(f"{where}: {layer}/ includes {inc} of {target}/, a layer above it")
        elif private and target != layer and layer not in interfaces.get(inc[3:], set()):
            errors.append(f"{where}: {layer}/ includes {target}/'s private {inc[3:]}, not its "
                          f"interface to {layer}/")

    for top in ("src", "cli", os.path.join("include", "dtrain")):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for f in sorted(files):
                if not f.endswith((".c", ".h")):
                    continue
                full = os.path.join(dirpath, f)
                path = os.path.relpath(full, root)
                parts = path.split(os.sep)
                if parts[0] == "src":
                    layer = parts[1]
                elif parts[0] == "cli":
                    layer = "cli"
                else:
                    layer = owners.get(f)
                    if layer is None:
                        unknown.append(f"{path}: no layer owns this public header")
                        continue
                for n, text in enumerate(open(full, errors="replace"), 1):
                    m = INCLUDE.match(text)
                    if not m:
                        continue
                    inc = m.group(1)
                    if inc.startswith("dtrain/"):
                        check(path, layer, n, inc, owners.get(inc[7:]), False)
                    elif layer == "cli" and inc.startswith("../src/"):
                        # The command's files reach a private header as ../src/L/x.h.
                        check(path, layer, n, inc[4:], inc.split("/")[2], True)
                    elif inc.startswith("../"):
                        check(path, layer, n, inc, inc.split("/")[1], True)
    stale = sorted(debt - seen_debt)
    for path, header in stale:
        errors.append(f"{doc}: the edge {path} -> {header} is listed as still to remove but no "
                      "longer exists: drop it from the list")
    for line in unknown + errors:
        print(line)
    print(f"layers: {len(rank)} layers, {len(seen_debt)} listed edges still to remove, "
          f"{len(errors) + len(unknown)} violations")
    return 1 if errors or unknown else 0


if __name__ == "__main__":
    sys.exit(main())
