#!/usr/bin/env python3
"""The architecture's rules, checked on the source tree (run by ctest as `layering_check`).

1. Modules: each src/moe/<folder>/CMakeLists.txt declares `moe_module(<folder> ... DEPS ...
   [API ...])`. The declared dependencies form no cycle.
2. Includes: a source in src/moe/<m>/ includes "moe/<d>/..." only for d = m or a module m
   reaches through DEPS; a public header "moe/<x>.h" (include/moe/) only when its owner
   (PUBLIC_OWNER below) is reachable through DEPS or listed in API.
3. Public headers (include/moe/) include no "moe/<folder>/..." header.
4. The CLI (tools/moe/) calls no MPI function and includes no <mpi.h>: MPI belongs to
   src/moe/comm/.
5. No source file over 600 lines unless a line near its top says "Over 600 lines:" and why.
6. The MoE hot path (headers of moe/, ops/, transformer/, runtime/ and comm/communicator.h) declares
   no function with more than 5 parameters.
7. The docs name every module, and no folder that is none: docs/architecture.md's table of
   folders ("## Where things live") has a row "| `<folder>/` |" for each folder of src/moe/,
   README.md's "## Layout" names "src/moe/<folder>/"; neither names a src/moe/ folder that
   does not exist.

Usage: layering_check.py [source root]   (exit 1 and one line per violation on failure)
"""
import os
import re
import sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))
SRC = os.path.join(ROOT, "src", "moe")
PUBLIC = os.path.join(ROOT, "include", "moe")
MAX_LINES = 600
MAX_PARAMS = 5
HOT_PATH = ["moe", "ops", "transformer", "runtime"]
HOT_PATH_FILES = ["comm/communicator.h"]
# Owner module of each public header (include/moe/<name>).
PUBLIC_OWNER = {
    "status.h": "core",
    "engine.h": "engine",
    "engine_options.h": "engine",
    "scheduler.h": "engine",
    "generation_service.h": "engine",
    "generation_types.h": "engine",
    "launch.h": "engine",
}

errors = []


def read(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def sources(folder, exts=(".h", ".cc", ".cu", ".cuh")):
    for dirpath, _, files in os.walk(folder):
        for name in sorted(files):
            if name.endswith(exts):
                yield os.path.join(dirpath, name)


def rel(path):
    return os.path.relpath(path, ROOT)


# 1. Modules and their declared dependencies.
modules = {}
for entry in sorted(os.listdir(SRC)):
    cml = os.path.join(SRC, entry, "CMakeLists.txt")
    if not os.path.isdir(os.path.join(SRC, entry)):
        continue
    if not os.path.exists(cml):
        errors.append(f"src/moe/{entry}/: a module folder without a CMakeLists.txt declaring moe_module({entry} ...)")
        continue
    text = re.sub(r"#[^\n]*", "", read(cml))
    m = re.search(r"moe_module\(\s*(\w+)(.*?)\)\s*(?:\n|$)", text, re.S)
    if not m or m.group(1) != entry:
        errors.append(f"{rel(cml)}: no moe_module({entry} ...) call")
        continue
    body = m.group(2)
    decl = {}
    for key in ("DEPS", "API"):
        km = re.search(key + r"\s+((?:[\w${}]+\s*)+?)(?=\b(?:SOURCES|DEPS|API|LIBS|PRIVATE_LIBS)\b|$)", body, re.S)
        decl[key] = km.group(1).split() if km else []
    modules[entry] = decl

for name, decl in modules.items():
    for d in decl["DEPS"] + decl["API"]:
        if d not in modules:
            errors.append(f"src/moe/{name}/CMakeLists.txt: depends on '{d}', which is no module under src/moe/")


def reach(name, seen=None, stack=()):
    """Modules `name` reaches through DEPS (itself included); reports cycles."""
    if name in stack:
        errors.append("module dependency cycle: " + " -> ".join(stack + (name,)))
        return set()
    out = {name}
    for d in modules.get(name, {}).get("DEPS", []):
        if d in modules:
            out |= reach(d, seen, stack + (name,))
    return out


reachable = {name: reach(name) for name in modules}

# 2. Includes of each module.
include_re = re.compile(r'^\s*#\s*include\s+"moe/([^"]+)"', re.M)
for name in modules:
    allowed = reachable[name]
    api = set(modules[name]["API"])
    for path in sources(os.path.join(SRC, name)):
        for inc in include_re.findall(read(path)):
            if "/" in inc:
                target = inc.split("/", 1)[0]
                if target not in allowed:
                    errors.append(f"{rel(path)}: includes \"moe/{inc}\", but module '{name}' does not depend on '{target}'")
            else:
                owner = PUBLIC_OWNER.get(inc)
                if owner is None:
                    errors.append(f"{rel(path)}: includes \"moe/{inc}\", a public header missing from PUBLIC_OWNER in {rel(__file__)}")
                elif owner not in allowed and owner not in api:
                    errors.append(f"{rel(path)}: includes public \"moe/{inc}\" (module '{owner}'), not among '{name}' DEPS or API")

# 3. Public headers include public headers only.
for path in sources(PUBLIC):
    if os.path.basename(path) not in PUBLIC_OWNER:
        errors.append(f"{rel(path)}: a public header missing from PUBLIC_OWNER in {rel(__file__)}")
    for inc in include_re.findall(read(path)):
        if "/" in inc:
            errors.append(f"{rel(path)}: public header includes internal \"moe/{inc}\"")

# 4. No MPI in the CLI.
mpi_call = re.compile(r"\bMPI_[A-Z][A-Za-z_]*\b")
for path in sources(os.path.join(ROOT, "tools")):
    text = re.sub(r"//[^\n]*|\"(?:\\.|[^\"\\])*\"", "", read(path))
    if re.search(r"#\s*include\s*<mpi\.h>", text):
        errors.append(f"{rel(path)}: includes <mpi.h>; MPI is used only through src/moe/comm/")
    calls = sorted(set(mpi_call.findall(text)))
    if calls:
        errors.append(f"{rel(path)}: uses MPI directly ({', '.join(calls[:4])}); go through src/moe/comm/")

# 5. File length.
for top in ("src", "include", "tools", "bench"):
    for path in sources(os.path.join(ROOT, top)):
        lines = read(path).split("\n")
        if len(lines) > MAX_LINES and not any("Over 600 lines:" in l for l in lines[:20]):
            errors.append(f"{rel(path)}: {len(lines)} lines (> {MAX_LINES}) with no 'Over 600 lines:' reason at its top")


# 6. Hot-path parameter counts.
def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def top_level_params(arglist):
    depth, count, nonempty = 0, 1, False
    for ch in arglist:
        if ch in "(<{[":
            depth += 1
        elif ch in ")>}]":
            depth -= 1
        elif ch == "," and depth == 0:
            count += 1
        if not ch.isspace():
            nonempty = True
    return count if nonempty and arglist.strip() != "void" else 0


decl_re = re.compile(r"\b([A-Za-z_]\w*)\s*\(")
hot = [p for m in HOT_PATH for p in sources(os.path.join(SRC, m), (".h",))]
hot += [os.path.join(SRC, f) for f in HOT_PATH_FILES if os.path.exists(os.path.join(SRC, f))]
keywords = {"if", "for", "while", "switch", "return", "sizeof", "static_assert", "decltype", "alignof", "defined"}
for path in hot:
    text = strip_comments(read(path))
    for m in decl_re.finditer(text):
        fname = m.group(1)
        if fname in keywords or fname.startswith("MOE_"):
            continue
        # The matching close paren.
        i, depth = m.end(), 1
        while i < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        args = text[m.end():i - 1]
        tail = text[i:i + 80].lstrip()
        # A declaration or definition: followed by ; { const override = 0 -> noexcept.
        if not re.match(r"(const\b|override\b|noexcept\b|=|;|\{|->|final\b)", tail):
            continue
        # Calls inside inline bodies look the same; a declaration has a type before the name.
        before = text[max(0, m.start() - 60):m.start()].rstrip()
        if not re.search(r"[\w>&*:]\s*$", before) or re.search(r"(\breturn|[=(,+\-*/])\s*$", before):
            continue
        n = top_level_params(args)
        if n > MAX_PARAMS:
            line = text[:m.start()].count("\n") + 1
            errors.append(f"{rel(path)}: {fname}() takes {n} parameters (> {MAX_PARAMS} on the MoE hot path); "
                          "pass a struct or tensor views")

# 7. The docs name every module (and only modules).
module_dirs = sorted(e for e in os.listdir(SRC) if os.path.isdir(os.path.join(SRC, e)))
DOC_NAMES = [
    # (file, its part that names the folders: the heading it starts at, how it names folder {})
    ("docs/architecture.md", "## Where things live", re.compile(r"^\| `(\w+)/` \|", re.M), "| `{}/` |"),
    ("README.md", "## Layout", re.compile(r"\bsrc/moe/(\w+)/"), "src/moe/{}/"),
]
for doc, heading, name_re, form in DOC_NAMES:
    path = os.path.join(ROOT, doc)
    text = read(path) if os.path.exists(path) else ""
    start = text.find("\n" + heading + "\n")
    if start < 0:
        errors.append(f'{doc}: no section "{heading}" naming every folder of src/moe/')
        continue
    end = text.find("\n## ", start + 1)
    named = set(name_re.findall(text[start:end if end >= 0 else len(text)]))
    for name in module_dirs:
        if name not in named:
            errors.append(f'{doc}: "{heading}" does not name src/moe/{name}/ (as "{form.format(name)}")')
    for name in sorted(named - set(module_dirs)):
        errors.append(f'{doc}: "{heading}" names "{form.format(name)}", but src/moe/{name}/ does not exist')

if errors:
    print(f"{len(errors)} architecture rule violation(s):")
    for e in errors:
        print("  " + e)
    sys.exit(1)
print(f"architecture rules hold: {len(modules)} modules, includes, public headers, CLI without MPI, "
      f"file sizes, hot-path parameter counts, every module named in docs/architecture.md and README.md")
