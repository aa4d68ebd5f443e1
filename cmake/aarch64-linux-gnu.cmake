# Cross-compiling for 64-bit Arm on an x86-64 Debian 12 host, with Debian's cross toolchain
# (g++-aarch64-linux-gnu) and its arm64 -dev packages installed side by side (multiarch:
# `dpkg --add-architecture arm64`; scripts/install_deps.sh --arm64). Tests run under
# qemu-user: CTest and gtest_discover_tests start each test binary through the emulator.
# Used with -DPDSERVE_ENGINE_ONLY=ON (the engine and its tests; see CMakeLists.txt).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
# Debian's multiarch layout: arm64 libraries and CMake configs under /usr/lib/aarch64-linux-gnu.
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)  # Host tools (python3, pkg-config).
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)
# The arm64 loader and C library are multiarch libc6:arm64's (/lib/ld-linux-aarch64.so.1),
# pulled in by the -dev packages. Not the cross toolchain's copy (qemu-aarch64 -L
# /usr/aarch64-linux-gnu): with it, qemu 7.2 hangs in a program's first pthread_create.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64)
