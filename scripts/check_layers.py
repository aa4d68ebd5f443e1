#!/usr/bin/env python3
"""Checks that the source folders form the layers docs/architecture.md describes.

Each top-level product folder may include headers only from the folders listed for it below
(its own always). An include that runs from a lower folder to a higher one, or sideways to a
folder not listed, fails the check with the file, the line and the rule it breaks. The same
table is the one docs/architecture.md ("Layers") states; change both together.

Usage: scripts/check_layers.py [--root DIR] [--selftest]
Exit status: 0 when every include obeys the table, 1 otherwise. --selftest checks the checker:
on a throw-away tree it must pass a legal include and name an upward and a sideways one.
"""

import argparse
import os
import re
import sys
import tempfile

# Lowest first. A folder may include from the folders it lists (and their own lists are
# not inherited: every dependency is named, so the table reads as the link graph).
LAYERS = {
    "common": [],
    "proto": [],
    "text": ["common"],
    "kvcache": ["common"],
    "kvtransfer": ["common"],
    "engine": ["common", "text", "kvcache"],
    "wire": ["common", "proto", "text", "kvtransfer"],
    "server": ["common", "proto", "wire"],
    "router": ["common", "proto", "text", "kvcache", "server", "wire"],
    "worker": ["common", "proto", "text", "kvcache", "kvtransfer", "engine", "server", "wire"],
    "prefill_worker": ["common", "proto", "text", "kvcache", "kvtransfer", "engine", "server",
                       "wire", "worker"],
    "decode_worker": ["common", "proto", "text", "kvcache", "kvtransfer", "engine", "server",
                      "wire", "worker", "prefill_worker"],
    "tools": ["common", "proto", "text", "kvcache", "kvtransfer", "engine", "server", "wire",
              "router", "worker", "prefill_worker", "decode_worker"],
    "sim": ["common", "proto", "text", "kvcache", "kvtransfer", "engine", "server", "wire",
            "router", "worker", "prefill_worker", "decode_worker", "tools"],
    "bench": ["common", "proto", "text", "kvcache", "kvtransfer", "engine", "server", "wire",
              "router", "worker", "prefill_worker", "decode_worker", "tools", "sim"],
}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([A-Za-z0-9_]+)/')
SOURCE_SUFFIXES = (".h", ".cc", ".cu", ".cuh")


def violations(root):
    found = []
    for folder, allowed in LAYERS.items():
        base = os.path.join(root, folder)
        if not os.path.isdir(base):
            found.append(f"{folder}/: listed in the layer table but missing")
            continue
        permitted = set(allowed) | {folder}
        for dirpath, _, names in os.walk(base):
            for name in sorted(names):
                if not name.endswith(SOURCE_SUFFIXES):
                    continue
                path = os.path.join(dirpath, name)
                with open(path, encoding="utf-8") as f:
                    for number, line in enumerate(f, 1):
                        match = INCLUDE.match(line)
                        if not match:
                            continue
                        target = match.group(1)
                        if target in LAYERS and target not in permitted:
                            rel = os.path.relpath(path, root)
                            found.append(f"{rel}:{number}: {folder}/ may not include {target}/ "
                                         f"(allowed: {', '.join(sorted(permitted))})")
    return found


def selftest():
    """The checker on a tree of its own: a legal include passes, illegal ones are named."""
    with tempfile.TemporaryDirectory() as root:
        for folder in LAYERS:
            os.makedirs(os.path.join(root, folder))

        def write(rel, text):
            with open(os.path.join(root, rel), "w", encoding="utf-8") as f:
                f.write(text)

        write("engine/model.h", '#include "text/tokenizer.h"\n#include "common/clock.h"\n')
        if violations(root):
            print("selftest: a legal include was refused", file=sys.stderr)
            return 1
        write("common/clock.h", '#include "server/grpc_server.h"\n')
        write("text/tokenizer.h", '// #include "engine/model.h" in a comment is not an include\n'
              '  #  include "kvcache/kv_pool.h"\n')
        found = violations(root)
        expected = ["common/clock.h:1: common/ may not include server/",
                    "text/tokenizer.h:2: text/ may not include kvcache/"]
        missing = [e for e in expected if not any(f.startswith(e) for f in found)]
        if missing or len(found) != len(expected):
            print(f"selftest: expected {expected}, found {found}", file=sys.stderr)
            return 1
    print("check_layers selftest: passed")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default=os.path.join(os.path.dirname(__file__), ".."),
                        help="the repository root (default: this script's parent folder)")
    parser.add_argument("--selftest", action="store_true", help="check the checker and exit")
    args = parser.parse_args()
    if args.selftest:
        return selftest()
    root = os.path.abspath(args.root)
    unknown = sorted(
        d for d in os.listdir(root)
        if os.path.isdir(os.path.join(root, d)) and d not in LAYERS and not d.startswith(".")
        and any(n.endswith(SOURCE_SUFFIXES) for _, _, ns in os.walk(os.path.join(root, d))
                for n in ns)
        and d not in ("tests", "build", "deploy", "models", "cmake", "docs", "scripts")
        and not d.startswith("build"))
    problems = violations(root)
    problems += [f"{d}/: holds sources but has no place in the layer table" for d in unknown]
    for problem in problems:
        print(problem, flush=True)
    if problems:
        print(f"check_layers: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print(f"check_layers: {len(LAYERS)} folders, every include runs down the table")
    return 0


if __name__ == "__main__":
    sys.exit(main())
