#!/usr/bin/env python3
"""The image recipe deploy/docker/Dockerfile cannot be built here (no container engine), so
this checks what can be checked without one (CTest label "deploy"):
  - every binary the runtime stage copies exists in the build, and every binary the chart
    runs (its containers' commands) is among them;
  - the runtime stage's apt packages provide every shared library those binaries load (ldd,
    then dpkg -S on this Debian 12 machine, the image's base);
  - the build stage runs the README's install and build scripts.
Usage: dockerfile_test.py BIN_DIR
"""

import os
import re
import subprocess
import sys

SOURCE_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DOCKERFILE = os.path.join(SOURCE_DIR, "deploy", "docker", "Dockerfile")
CHART_TEMPLATES = os.path.join(SOURCE_DIR, "deploy", "helm", "pdserve", "templates")
# Loaded from the C library, present in every Debian image.
BASE_PACKAGES = {"libc6", "libgcc-s1", "zlib1g", "libzstd1", "liblzma5"}
# The Dockerfile to check (tests plant defects in a copy).
DOCKERFILE = os.environ.get("PDSERVE_DOCKERFILE", DOCKERFILE)


def path_spellings(lib):
    """dpkg knows /lib/... and /usr/lib/... apart (merged /usr): every spelling of a path."""
    real = os.path.realpath(lib)
    out = [lib, real]
    for path in (lib, real):
        if path.startswith("/usr/lib/"):
            out.append(path[len("/usr"):])
        elif path.startswith("/lib/"):
            out.append("/usr" + path)
    return out


def owners(libs):
    """library -> owning Debian package (None if none), with one dpkg -S for all of them."""
    spellings = {lib: path_spellings(lib) for lib in libs}
    every = sorted({p for paths in spellings.values() for p in paths})
    proc = subprocess.run(["dpkg", "-S"] + every, capture_output=True, text=True)
    package_of_path = {}
    for line in proc.stdout.splitlines():
        package, _, path = line.partition(": ")
        package_of_path[path.strip()] = package.split(":")[0]
    return {lib: next((package_of_path[p] for p in paths if p in package_of_path), None)
            for lib, paths in spellings.items()}


def main():
    bin_dir = sys.argv[1]
    text = open(DOCKERFILE).read()
    stages = re.split(r"^FROM ", text, flags=re.M)[1:]
    if len(stages) != 2:
        sys.exit(f"expected two stages, found {len(stages)}")
    build, runtime = stages
    problems = []
    for step in ("scripts/install_deps.sh", "scripts/build.sh image"):
        if step not in build:
            problems.append(f"the build stage does not run {step}")
    if not runtime.startswith("debian:12"):
        problems.append("the runtime stage is not Debian 12")
    copied = re.findall(r"/src/build-image/bin/([A-Za-z0-9_-]+)", runtime)
    # The image builds exactly what it ships: scripts/build.sh image's targets.
    build_sh = open(os.path.join(SOURCE_DIR, "scripts", "build.sh")).read()
    image_flavor = build_sh.split("  image)", 1)[1].split(";;", 1)[0] if "  image)" in build_sh else ""
    if "-DPDSERVE_BUILD_TESTS=OFF" not in image_flavor:
        problems.append("scripts/build.sh image builds the tests")
    for binary in copied:
        if binary not in image_flavor:
            problems.append(f"scripts/build.sh image does not build {binary}")
    # A checkout that has been built holds build trees whose CMake caches name host paths:
    # copied into the context, ninja runs against them. .dockerignore keeps them out.
    ignore_path = os.path.join(SOURCE_DIR, ".dockerignore")
    ignored = open(ignore_path).read().split() if os.path.exists(ignore_path) else []
    for tree in ("build", "build-*", "models", ".pdserve"):
        if tree not in ignored:
            problems.append(f".dockerignore does not exclude {tree}")
    packages = set(re.findall(r"\b(lib[a-z0-9+.-]+[0-9][a-z0-9.+-]*)\b",
                              runtime.split("apt-get install", 1)[1].split("rm -rf")[0]))
    chart_commands = set()
    for name in os.listdir(CHART_TEMPLATES):
        chart_commands |= set(re.findall(r'command: \["(pdserve-[a-z-]+)', open(
            os.path.join(CHART_TEMPLATES, name)).read()))
    chart_commands = {c.replace("{{ $role }}", "") for c in chart_commands}
    for role_command in ("pdserve-router", "pdserve-prefill", "pdserve-decode",
                         "pdserve-make-model", "pdserve-kv-probe"):
        if role_command not in copied:
            problems.append(f"the image lacks {role_command}")
    for command in chart_commands:
        if command.endswith("-"):
            continue  # pdserve-{{ $role }}: prefill and decode, checked above.
        if command not in copied:
            problems.append(f"the chart runs {command}, which the image lacks")
    libs = set()
    for binary in copied:
        path = os.path.join(bin_dir, binary)
        if not os.path.exists(path):
            problems.append(f"{binary} is not in {bin_dir}")
            continue
        ldd = subprocess.run(["ldd", path], capture_output=True, text=True).stdout
        # This build may have CUDA; the CPU image's build stage has no nvcc.
        libs |= {lib for lib in re.findall(r"=> (/\S+)", ldd)
                 if not lib.startswith("/usr/local/cuda")}
    needed = set()
    for lib, owner in sorted(owners(libs).items()):
        if owner is None:
            problems.append(f"{lib} belongs to no Debian package")
        else:
            needed.add(owner)
    missing = needed - packages - BASE_PACKAGES
    for package in sorted(missing):
        problems.append(f"the runtime stage does not install {package}")
    print(f"dockerfile: {len(copied)} binaries, {len(needed)} library packages needed, "
          f"{len(packages)} installed")
    for p in problems:
        print("  " + p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
