#!/usr/bin/env python3
"""Checks that src/ keeps the layout of DESIGN.md: no include cycle between units (a unit is a
header and its source, such as remote/io/connection.hpp and .cpp), and no include from one folder
into another that ALLOWED below does not list (core -> remote, backends -> remote and
agent -> controller among them). Prints each problem and exits 1 if there is any.

  tools/check_layout.py [SRC]      SRC defaults to the src/ beside this script's folder
  tools/check_layout.py --self-test  checks that each kind of problem is found, in trees it makes
"""
import os
import re
import sys

# What each folder of src/ may include besides itself. "rig" is include/rig, the public API.
# A folder not listed may include nothing of ours but itself and the public headers.
BELOW_JOB = ["remote", "remote/wire", "remote/trust", "remote/io", "remote/job"]
ALLOWED = {
    "core": ["rig"],
    "program": ["rig", "core"],
    "backends": ["rig", "core", "program", "backends/*"],
    "backends/*": ["rig", "core", "program", "backends", "backends/*"],
    "remote": ["core"],  # limits.hpp declares its tunables with core/tunables.hpp
    "remote/wire": ["rig", "core", "remote"],
    "remote/trust": ["rig", "remote", "remote/wire"],
    "remote/io": ["rig", "core", "remote", "remote/wire", "remote/trust"],
    "remote/job": ["rig", "core", "remote", "remote/wire", "remote/trust", "remote/io"],
    "remote/controller": ["rig", "core", "program"] + BELOW_JOB,
    "remote/agent": ["rig", "core", "program", "backends"] + BELOW_JOB,
}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def rule_for(folder):
    if folder in ALLOWED:
        return folder, ALLOWED[folder]
    parent = folder.split("/")[0] + "/*"
    if parent in ALLOWED:
        return parent, ALLOWED[parent]
    return folder, ["rig"]


def allowed(src_folder, dst_folder):
    if dst_folder == src_folder:
        return True
    _, targets = rule_for(src_folder)
    for t in targets:
        if t == dst_folder:
            return True
        if t.endswith("/*") and dst_folder.startswith(t[:-1]):
            return True
    return False


def strongly_connected(graph):
    """Tarjan's algorithm, iterative; yields each component of more than one unit."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in graph:
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    u = stack.pop()
                    on_stack.discard(u)
                    component.append(u)
                    if u == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def problems_in(src):
    units = {}  # unit -> set of units it includes
    edges = []  # (file, included path)
    for dirpath, _, names in os.walk(src):
        for name in names:
            if not name.endswith((".cpp", ".hpp", ".h", ".c")):
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, src)
            unit = os.path.splitext(rel)[0]
            deps = units.setdefault(unit, set())
            with open(path, encoding="utf-8") as f:
                for inc in INCLUDE.findall(f.read()):
                    edges.append((rel, inc))
                    target = os.path.splitext(inc)[0]
                    if target != unit:
                        deps.add(target)
    problems = []
    for rel, inc in sorted(edges):
        src_folder = os.path.dirname(rel)
        dst_folder = os.path.dirname(inc)
        if dst_folder == "" or inc.startswith("rig/") and dst_folder != "rig":
            continue  # a system-style header of its own folder, or a nested public header
        if not allowed(src_folder, dst_folder):
            problems.append(f"{rel} includes {inc}: {src_folder}/ may not depend on {dst_folder}/")
    for component in strongly_connected(units):
        problems.append("include cycle between units: " + ", ".join(component))
    return problems, len(units), len(edges)


def self_test():
    """Each tree holds one problem (or none), and the check must say exactly that."""
    import tempfile

    cases = {
        "a clean tree": ({"core/a.hpp": "", "core/a.cpp": '#include "core/a.hpp"',
                          "remote/agent/x.cpp": '#include "remote/io/y.hpp"',
                          "remote/io/y.hpp": '#include "remote/wire/z.hpp"'}, []),
        "a cycle through a source file": ({
            "remote/controller/proxy.hpp": "", "remote/controller/proxy.cpp":
            '#include "remote/controller/controller.hpp"', "remote/controller/controller.hpp":
            '#include "remote/controller/proxy.hpp"'},
            ["include cycle between units: remote/controller/controller, "
             "remote/controller/proxy"]),
        "the agent on the controller": ({"remote/agent/a.cpp": '#include "remote/controller/c.hpp"',
                                         "remote/controller/c.hpp": ""},
                                        ["remote/agent/a.cpp includes remote/controller/c.hpp: "
                                         "remote/agent/ may not depend on remote/controller/"]),
        "core on remote": ({"core/a.cpp": '#include "remote/io/b.hpp"', "remote/io/b.hpp": ""},
                           ["core/a.cpp includes remote/io/b.hpp: core/ may not depend on "
                            "remote/io/"]),
        "a backend on remote": ({"backends/cuda/a.cpp": '#include "remote/wire/b.hpp"',
                                 "remote/wire/b.hpp": ""},
                                ["backends/cuda/a.cpp includes remote/wire/b.hpp: backends/cuda/ "
                                 "may not depend on remote/wire/"]),
        "a lower layer on a higher one": ({"remote/io/a.cpp": '#include "remote/job/b.hpp"',
                                           "remote/job/b.hpp": ""},
                                          ["remote/io/a.cpp includes remote/job/b.hpp: remote/io/ "
                                           "may not depend on remote/job/"]),
    }
    failed = 0
    for name, (files, expected) in cases.items():
        with tempfile.TemporaryDirectory() as root:
            for rel, text in files.items():
                os.makedirs(os.path.join(root, os.path.dirname(rel)), exist_ok=True)
                with open(os.path.join(root, rel), "w", encoding="utf-8") as f:
                    f.write(text + "\n")
            found = problems_in(root)[0]
        if found != expected:
            failed = 1
            print(f"check_layout self-test: {name}: found {found}, expected {expected}")
    if not failed:
        print(f"check_layout self-test: {len(cases)} trees, each problem found")
    return failed


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    here = os.path.dirname(os.path.abspath(__file__))
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "src")
    problems, units, edges = problems_in(os.path.normpath(src))
    for p in problems:
        print("check_layout: " + p)
    if problems:
        return 1
    print(f"check_layout: {units} units, {edges} includes: no cycle, no edge out of place")
    return 0


if __name__ == "__main__":
    sys.exit(main())
