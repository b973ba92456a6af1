#!/usr/bin/env python3
"""The export test: what libdtrain.so exports against what the public headers declare DT_API.

The library is built with -fvisibility=hidden, so a name is exported only when the declaration
its definition sees carries DT_API (include/dtrain/api.h). Every defined dynamic symbol of the
library (nm -D --defined-only) must be a name that a header under include/dtrain/ declares with
DT_API, and every such name must be exported: an internal function that leaks into the ABI, or a
public one whose definition misses its header (and so stays hidden), fails, named. So does a
function or variable that a public header declares without DT_API: the library would hide it,
and a program that calls it would not link against libdtrain.so.

usage: tests/exports.py INCLUDE_DIR LIBRARY   (exit 0 when the two sets are equal)
"""
import os
import re
import subprocess
import sys

IDENT = re.compile(r"[A-Za-z_]\w*")


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    # Preprocessor lines (the #define of DT_API itself among them) declare nothing.
    return re.sub(r"^\s*#(?:[^\n]*\\\n)*[^\n]*", " ", text, flags=re.M)


def declared_name(decl):
    """The name a declaration (the text after DT_API, up to its ';') declares: a function's is
    the identifier before its parameter list; a variable's the last identifier before an array
    bound, an initialiser or the end."""
    decl = re.sub(r"__attribute__\s*\(\(.*?\)\)", " ", decl, flags=re.S)
    depth, cut = 0, len(decl)
    for i, ch in enumerate(decl):
        if ch in "([=" and depth == 0:
            cut = i
            break
    names = IDENT.findall(decl[:cut])
    return names[-1] if names else None


def declarations(text):
    """The top-level declarations of a header (comments and preprocessor lines removed): the
    text of each statement that ends in ';' outside braces, less typedefs, struct and enum
    definitions; a static inline function (which ends in '}') is no declaration."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0 and text[start:i].lstrip().startswith("static"):
                start = i + 1
        elif ch == ";" and depth == 0:
            stmt = " ".join(text[start:i].split())
            start = i + 1
            first = stmt.split(" ", 1)[0]
            if stmt and first not in ("typedef", "struct", "enum", "union", "static"):
                out.append(stmt)
    return out


def public_names(include_dir):
    """{name: header} for every DT_API declaration under include_dir, and [(header, name)] for
    the functions and variables declared there without DT_API (which the library hides)."""
    names, bare = {}, []
    for dirpath, _, files in os.walk(include_dir):
        for f in sorted(files):
            if not f.endswith(".h"):
                continue
            path = os.path.join(dirpath, f)
            header = os.path.relpath(path, os.path.dirname(include_dir))
            text = strip_comments(open(path, errors="replace").read())
            for decl in declarations(text):
                words = decl.split(" ")
                is_api = "DT_API" in words
                rest = " ".join(w for w in words if w not in ("DT_API", "extern"))
                if not is_api and "(" not in decl and words[0] != "extern":
                    continue
                name = declared_name(rest)
                if not name:
                    continue
                if is_api:
                    names[name] = header
                else:
                    bare.append((header, name))
    return names, bare


def exported_names(library):
    out = subprocess.run(["nm", "-D", "--defined-only", library], capture_output=True,
                         text=True, check=True).stdout
    names = {}
    for line in out.splitlines():
        parts = line.split()
        # AddressSanitizer (make asan) adds an ODR indicator beside each exported variable.
        if len(parts) >= 3 and not parts[2].startswith("__odr_asan."):
            names[parts[2].split("@")[0]] = parts[1]
    return names


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    include_dir, library = sys.argv[1], sys.argv[2]
    public, bare = public_names(include_dir)
    exported = exported_names(library)
    leaked = sorted(set(exported) - set(public))
    hidden = sorted(set(public) - set(exported))
    for header, name in bare:
        print(f"{header}: declares {name} without DT_API: a public header's functions and "
              "variables are the library's exports; mark it DT_API, or move it to a private "
              "header")
    for name in leaked:
        print(f"{library}: exports {name} ({exported[name]}), which no public header declares "
              "DT_API: make it static, or declare it in include/dtrain/ with DT_API")
    for name in hidden:
        print(f"{public[name]}: declares {name} DT_API, but {library} does not export it: its "
              "definition must see that declaration (include the header), or it must go")
    print(f"exports: {len(exported)} exported, {len(public)} declared DT_API, "
          f"{len(leaked) + len(hidden) + len(bare)} violations")
    return 1 if leaked or hidden or bare else 0


if __name__ == "__main__":
    sys.exit(main())
