#!/usr/bin/env python3
"""Circles among a crate's modules: every `crate::…` and `super::…` path outside comments is an
arrow from the file it is written in to the module it names; a circle is a set of modules that
reach each other. Doc links (`//!`, `///`) are not arrows. Exits 1 when a crate has a circle.

    scripts/circles.py idem-runtime/src idem-macros/src src cli/src
"""
import os
import re
import sys


def modules(root):
    mods = {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            if f.endswith(".rs"):
                path = os.path.join(dirpath, f)
                name = os.path.relpath(path, root)[:-3].replace("/", "::")
                if name.endswith("::mod"):
                    name = name[: -len("::mod")]
                text = open(path, encoding="utf-8").read()
                code = "\n".join(
                    line for line in text.split("\n") if not line.lstrip().startswith("//")
                )
                mods[name] = code
    return mods


def arrows(mods):
    names = set(mods)
    edges = {m: set() for m in mods}
    for m, code in mods.items():
        for ref in re.findall(r"crate::([a-z_]+(?:::[a-z_]+)*)", code):
            parts = ref.split("::")
            for k in range(len(parts), 0, -1):
                cand = "::".join(parts[:k])
                if cand in names:
                    if cand != m and not m.startswith(cand + "::"):
                        edges[m].add(cand)
                    break
        parent = m.rsplit("::", 1)[0] if "::" in m else ""
        for ref in re.findall(r"\bsuper::([a-z_]+)", code):
            cand = parent + "::" + ref if parent else ref
            if cand in names and cand != m:
                edges[m].add(cand)
    return edges


def circles(edges):
    index, low, stack, on, found = {}, {}, [], set(), []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in edges:
        if v not in index:
            visit(v)
    return found


def main(roots):
    bad = False
    for root in roots:
        mods = modules(root)
        found = circles(arrows(mods))
        for c in found:
            print(f"{root}: circle: {' <-> '.join(c)}")
        print(f"{root}: {len(mods)} modules, {len(found)} circle(s)")
        bad |= bool(found)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["idem-runtime/src", "idem-macros/src", "src", "cli/src"]))
