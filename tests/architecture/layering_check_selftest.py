#!/usr/bin/env python3
"""The layering check must fail on each kind of violation: builds a small source tree with
one of each in a temp dir, runs layering_check.py on it, and checks every one is named
(and that a clean tree passes). Run by ctest as `layering_check_selftest`."""
import os
import subprocess
import sys
import tempfile

CHECK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "layering_check.py")


def write(root, path, text):
    full = os.path.join(root, path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w") as f:
        f.write(text)


def make_tree(root, bad):
    write(root, "src/moe/core/CMakeLists.txt", "moe_module(core\n  SOURCES a.cc)\n")
    write(root, "src/moe/ops/CMakeLists.txt", "moe_module(ops\n  SOURCES k.cc\n  DEPS core)\n")
    write(root, "src/moe/core/a.h", '#pragma once\n#include "moe/status.h"\n')
    write(root, "src/moe/ops/k.h", "#pragma once\nvoid k(const float* x, float* y, int n);\n")
    write(root, "include/moe/status.h", "#pragma once\n")
    write(root, "tools/moe/main.cc", "int main() { return 0; }\n")
    write(root, "docs/architecture.md", "# A\n\n## Where things live\n\n| folder | what |\n|---|---|\n"
                                        "| `core/` | basics |\n| `ops/` | kernels |\n\n## Next\n")
    write(root, "README.md", "# R\n\n## Layout\n\n```\nsrc/moe/core/  basics\nsrc/moe/ops/   kernels\n```\n")
    if not bad:
        return
    write(root, "src/moe/core/up.cc", '#include "moe/ops/k.h"\n')                       # upward include
    write(root, "src/moe/ops/wide.h", "#pragma once\nvoid wide(int a, int b, int c, int d, int e, int f);\n")
    write(root, "include/moe/engine.h", '#pragma once\n#include "moe/core/a.h"\n')    # public -> internal
    write(root, "tools/moe/bench.cc", "#include <mpi.h>\nvoid f() { MPI_Barrier(MPI_COMM_WORLD); }\n")
    write(root, "src/moe/core/long.cc", "int x;\n" * 700)
    write(root, "src/moe/cycle/CMakeLists.txt", "moe_module(cycle\n  SOURCES c.cc\n  DEPS cycle2)\n")
    write(root, "src/moe/cycle2/CMakeLists.txt", "moe_module(cycle2\n  SOURCES c.cc\n  DEPS cycle)\n")
    # Docs that drifted: README's layout leaves ops/ out (named only outside it) and names a
    # folder that is gone; the architecture table lacks the cycle modules.
    write(root, "README.md", "# R\n\n## Layout\n\n```\nsrc/moe/core/  basics\nsrc/moe/gone/  removed\n```\n\n"
                             "## Other\n\nsrc/moe/ops/ is mentioned here only.\n")


def run(root):
    r = subprocess.run([sys.executable, CHECK, root], capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


failures = []
with tempfile.TemporaryDirectory() as clean:
    make_tree(clean, bad=False)
    code, out = run(clean)
    if code != 0:
        failures.append("a clean tree failed:\n" + out)
with tempfile.TemporaryDirectory() as bad:
    make_tree(bad, bad=True)
    code, out = run(bad)
    if code == 0:
        failures.append("a tree with violations passed")
    for needle in [
        "src/moe/core/up.cc: includes \"moe/ops/k.h\", but module 'core' does not depend on 'ops'",
        "wide() takes 6 parameters",
        "include/moe/engine.h: public header includes internal \"moe/core/a.h\"",
        "tools/moe/bench.cc: includes <mpi.h>",
        "tools/moe/bench.cc: uses MPI directly (MPI_Barrier, MPI_COMM_WORLD)",
        "src/moe/core/long.cc: 701 lines",
        "module dependency cycle: cycle -> cycle2 -> cycle",
        'README.md: "## Layout" does not name src/moe/ops/ (as "src/moe/ops/")',
        'README.md: "## Layout" names "src/moe/gone/", but src/moe/gone/ does not exist',
        'docs/architecture.md: "## Where things live" does not name src/moe/cycle/ (as "| `cycle/` |")',
    ]:
        if needle not in out:
            failures.append(f"not reported: {needle}")
    if failures:
        failures.append("output was:\n" + out)
if failures:
    print("\n".join(failures))
    sys.exit(1)
print("layering_check reports every kind of violation and passes a clean tree")
