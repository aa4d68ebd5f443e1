#!/usr/bin/env python3
"""The image recipe deploy/docker/Dockerfile cannot be built here (no container engine), so
this checks what can be checked without one (CTest label "deploy"), for each variant (the
PDSERVE_VARIANT build argument: cpu, cuda):
  - every binary the final stage copies exists in the build, and every binary the chart runs
    (its containers' commands) is among them;
  - the variant's runtime stages install a package for every shared library those binaries
    load: Debian 12 packages (ldd, then dpkg -S on this Debian 12 machine, the image's base),
    and in the cuda variant NVIDIA's packages for the CUDA runtime and for cuBLAS, which the
    CUDA backend loads at start, of the CUDA version its build stage compiles with;
  - the variant's build stage runs the README's install and build scripts, with the CUDA
    backend on in the cuda variant and off in the cpu one.
Usage: dockerfile_test.py BIN_DIR       check deploy/docker/Dockerfile (or $PDSERVE_DOCKERFILE)
       dockerfile_test.py --self-test BIN_DIR
                                        plant defects in copies of it: each must be reported
"""

import os
import re
import subprocess
import sys

SOURCE_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(SOURCE_DIR, "deploy", "docker"))
import stages  # noqa: E402  (deploy/docker/stages.py)

DOCKERFILE = os.environ.get("PDSERVE_DOCKERFILE",
                            os.path.join(SOURCE_DIR, "deploy", "docker", "Dockerfile"))
CHART_TEMPLATES = os.path.join(SOURCE_DIR, "deploy", "helm", "pdserve", "templates")
# Loaded from the C library, present in every Debian image.
BASE_PACKAGES = {"libc6", "libgcc-s1", "zlib1g", "libzstd1", "liblzma5"}
# NVIDIA's package (less its -MAJOR-MINOR suffix) for each CUDA library, by soname stem.
NVIDIA_PACKAGES = stages.NVIDIA_PACKAGES
# Not linked but loaded by the CUDA backend when it starts (engine/cuda/cuda_util.h, dlopen).
CUDA_LOADED = ["libcublas"]
VARIANTS = ("cpu", "cuda")


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


def installed(stage_list):
    """The packages the stages' RUN steps apt-get install."""
    out = set()
    for s in stage_list:
        for run in s.runs():
            for part in run.split("apt-get install")[1:]:
                words = part.split("&&")[0].split()
                out |= {w for w in words if not w.startswith("-")}
    return out


def loaded_libraries(bin_dir, binaries):
    """(Debian-side libraries, CUDA libraries by soname stem -> major) the binaries load."""
    debian, cuda = set(), {}
    for binary in binaries:
        ldd = subprocess.run(["ldd", os.path.join(bin_dir, binary)], capture_output=True,
                             text=True).stdout
        for name, path in re.findall(r"^\s*(\S+) => (/\S+)", ldd, flags=re.M):
            m = re.fullmatch(r"(lib[A-Za-z]+)\.so\.(\d+)", name)
            if m and m.group(1) in NVIDIA_PACKAGES:
                cuda[m.group(1)] = m.group(2)
            else:
                debian.add(path)
    return debian, cuda


def check(text, bin_dir):
    problems = []
    args, stage_list = stages.parse(text)
    named = stages.by_name(stage_list)
    if "PDSERVE_VARIANT" not in args:
        problems.append("no global ARG PDSERVE_VARIANT")
    final = stage_list[-1] if stage_list else None
    if final is None:
        return ["no stages"], ""
    copied = re.findall(r"/src/build-image/bin/([A-Za-z0-9_-]+)", final.text())
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
    chart_commands = set()
    for name in os.listdir(CHART_TEMPLATES):
        chart_commands |= set(re.findall(r'command: \["(pdserve-[a-z-]+)', open(
            os.path.join(CHART_TEMPLATES, name)).read()))
    for role_command in ("pdserve-router", "pdserve-prefill", "pdserve-decode",
                         "pdserve-make-model", "pdserve-kv-probe"):
        if role_command not in copied:
            problems.append(f"the image lacks {role_command}")
    for command in chart_commands:
        if command.endswith("-"):
            continue  # pdserve-{{ $role }}: prefill and decode, checked above.
        if command not in copied:
            problems.append(f"the chart runs {command}, which the image lacks")
    present = [b for b in copied if os.path.exists(os.path.join(bin_dir, b))]
    for binary in sorted(set(copied) - set(present)):
        problems.append(f"{binary} is not in {bin_dir}")
    debian_libs, cuda_libs = loaded_libraries(bin_dir, present)
    needed = set()
    for lib, owner in sorted(owners(debian_libs).items()):
        if owner is None:
            problems.append(f"{lib} belongs to no Debian package")
        else:
            needed.add(owner)

    for variant in VARIANTS:
        vargs = stages.variant_args(args, variant)
        runtime = stages.chain(stage_list, vargs)
        where = f"variant {variant}:"
        if not runtime[0].base.startswith("debian:12"):
            problems.append(f"{where} the runtime is not based on Debian 12 ({runtime[0].base})")
        build = named.get("build")
        build_stage = named.get(stages.substitute(build.base, vargs)) if build else None
        if build_stage is None:
            problems.append(f"{where} no build stage (FROM build-${{PDSERVE_VARIANT}} AS build)")
            continue
        build_text = "\n".join(s.text() for s in stages.chain(stage_list, vargs, build_stage))
        for step in ("scripts/install_deps.sh", "scripts/build.sh image"):
            if step not in build_text:
                problems.append(f"{where} the build stage does not run {step}")
        cuda_flag = f"-DPDSERVE_CUDA={'ON' if variant == 'cuda' else 'OFF'}"
        if cuda_flag not in build_text:
            problems.append(f"{where} the build stage does not pass {cuda_flag}")
        packages = installed(runtime)
        for package in sorted(needed - packages - BASE_PACKAGES):
            problems.append(f"{where} the runtime stages do not install {package}")
        if variant != "cuda":
            continue
        nvcc = re.search(r"\bcuda-nvcc-(\d+)-(\d+)\b", build_text)
        if not nvcc:
            problems.append(f"{where} the build stage installs no cuda-nvcc-MAJOR-MINOR")
            continue
        version = f"{nvcc.group(1)}-{nvcc.group(2)}"
        for stem, major in sorted(cuda_libs.items()):
            if major != nvcc.group(1):
                problems.append(f"{where} the binaries load {stem}.so.{major}, built with "
                                f"cuda-nvcc-{version}")
        for stem in sorted(set(cuda_libs) | set(CUDA_LOADED)):
            package = f"{NVIDIA_PACKAGES[stem]}-{version}"
            if package not in packages:
                problems.append(f"{where} the runtime stages do not install {package} "
                                f"(for {stem})")
        cuda_dir = f"/usr/local/cuda-{nvcc.group(1)}.{nvcc.group(2)}/"
        if not any(cuda_dir in s.text() and "ld.so.conf" in s.text() for s in runtime):
            problems.append(f"{where} the runtime stages do not add {cuda_dir} to ld.so.conf")
    return problems, (f"dockerfile: {len(copied)} binaries, {len(needed)} Debian library "
                      f"packages and {len(cuda_libs)} CUDA libraries needed, variants "
                      f"{', '.join(VARIANTS)}")


# Defects planted by --self-test: (description, old text, new text, a problem it must cause).
PLANTED = [
    ("a Debian library package missing", " libprotobuf32 ", " ",
     "do not install libprotobuf32"),
    ("cuBLAS missing from the cuda runtime", " libcublas-13-0 ", " ",
     "do not install libcublas-13-0"),
    ("the CUDA runtime of another version", "cuda-cudart-13-0", "cuda-cudart-12-8",
     "do not install cuda-cudart-13-0"),
    ("the cuda build without the CUDA backend", "-DPDSERVE_CUDA=ON", "-DPDSERVE_CUDA=AUTO",
     "does not pass -DPDSERVE_CUDA=ON"),
    ("the cpu build taking the host's nvcc", "-DPDSERVE_CUDA=OFF", "",
     "does not pass -DPDSERVE_CUDA=OFF"),
    ("no ld.so.conf entry for the CUDA libraries", "/etc/ld.so.conf.d/pdserve-cuda.conf",
     "/dev/null", "to ld.so.conf"),
    ("the final stage on the cpu runtime only", "FROM runtime-${PDSERVE_VARIANT}\n",
     "FROM runtime-cpu\n", "do not install libcublas-13-0"),
]


def self_test(bin_dir):
    text = open(DOCKERFILE).read()
    failures = []
    clean, _ = check(text, bin_dir)
    if clean:
        failures.append(f"the recipe itself has problems: {clean}")
    for description, old, new, expected in PLANTED:
        if old not in text:
            failures.append(f"{description}: the recipe has no {old!r} to change")
            continue
        problems, _ = check(text.replace(old, new, 1), bin_dir)
        if not any(expected in p for p in problems):
            failures.append(f"{description}: not reported (wanted '{expected}', got {problems})")
    for f in failures:
        print("  " + f)
    print(f"self-test: {len(PLANTED)} planted defects, {len(failures)} failures")
    return 1 if failures else 0


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--self-test":
        return self_test(sys.argv[2])
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    problems, summary = check(open(DOCKERFILE).read(), sys.argv[1])
    print(summary)
    for p in problems:
        print("  " + p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
