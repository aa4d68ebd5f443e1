#!/usr/bin/env python3
"""The stages of deploy/docker/Dockerfile as the image's checks read them, without a container
engine: tests/deploy/dockerfile_test.py (what each variant installs against what its binaries
load) and scripts/image_rootfs.sh (which replays a variant's runtime steps in a root).

A variant (the PDSERVE_VARIANT build argument) selects a chain of stages: the final stage's
base, that stage's base, and so on down to an image (debian:12-slim). Instructions are given
with their line continuations joined.

Usage: stages.py DOCKERFILE VARIANT [STAGE]
  prints the chain of STAGE (default: the final stage, the runtime) in the variant, one
  instruction a line: STAGE<TAB>INSTRUCTION<TAB>ARGUMENTS
       stages.py --nvidia-libraries PACKAGE
  prints the shared libraries NVIDIA's PACKAGE (without its version: cuda-cudart) holds, as
  file globs (libcudart.so.*), one a line
"""

import re
import sys

# The CUDA libraries the cuda variant's binaries need, by the NVIDIA package that holds each
# (named without its CUDA version: cuda-cudart-13-0 is cuda-cudart).
NVIDIA_PACKAGES = {"libcudart": "cuda-cudart", "libcublas": "libcublas",
                   "libcublasLt": "libcublas"}


def nvidia_libraries(package):
    """The libraries (stems, e.g. libcudart) NVIDIA's `package` holds."""
    return [lib for lib, p in NVIDIA_PACKAGES.items() if p == package]


class Stage:
    def __init__(self, name, base):
        self.name = name  # "" for an unnamed stage (the final one).
        self.base = base  # As written: may name another stage or hold ${ARG}.
        self.instructions = []  # (INSTRUCTION, arguments)

    def text(self):
        return "\n".join(f"{i} {a}" for i, a in self.instructions)

    def runs(self):
        return [a for i, a in self.instructions if i == "RUN"]


def parse(text):
    """(global ARG defaults, stages in order)."""
    joined = re.sub(r"\\\n", " ", text)
    args = {}
    stages = []
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        instruction, _, rest = line.partition(" ")
        instruction = instruction.upper()
        rest = re.sub(r"\s+", " ", rest.strip())
        if instruction == "FROM":
            m = re.fullmatch(r"(?:--\S+ )*(\S+)(?: AS (\S+))?", rest, flags=re.I)
            if not m:
                raise ValueError(f"cannot read FROM {rest}")
            stages.append(Stage(m.group(2) or "", m.group(1)))
        elif not stages and instruction == "ARG":
            name, _, default = rest.partition("=")
            args[name] = default
        elif stages:
            stages[-1].instructions.append((instruction, rest))
    return args, stages


def substitute(word, args):
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args.get(m.group(1) or m.group(2), ""), word)


def by_name(stages):
    return {s.name: s for s in stages if s.name}


def chain(stages, args, stage=None):
    """The stages `stage` (default: the final one) stands on, from the image up to it."""
    named = by_name(stages)
    out = []
    s = stage or stages[-1]
    while s is not None:
        out.insert(0, s)
        s = named.get(substitute(s.base, args))
    return out


def variant_args(args, variant):
    return dict(args, PDSERVE_VARIANT=variant)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--nvidia-libraries":
        libraries = nvidia_libraries(sys.argv[2])
        if not libraries:
            sys.exit(f"--nvidia-libraries: no libraries known for {sys.argv[2]}")
        for lib in libraries:
            print(f"{lib}.so.*")
        return
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    args, stages = parse(open(sys.argv[1]).read())
    top = by_name(stages).get(sys.argv[3]) if len(sys.argv) == 4 else stages[-1]
    if top is None:
        sys.exit(f"{sys.argv[1]}: no stage {sys.argv[3]}")
    for s in chain(stages, variant_args(args, sys.argv[2]), top):
        for instruction, rest in s.instructions:
            print(f"{s.name or '-'}\t{instruction}\t{rest}")


if __name__ == "__main__":
    main()
