# Third-party dependencies, all from Debian 12 packages (see scripts/install_deps.sh).
# Which find_package calls work with Debian's packaging is noted at each one.
# PDSERVE_ENGINE_ONLY (the cross-compiled Arm build) finds only what the engine, the layers
# under it (common/, text/, kvcache/) and its tests link.

if(NOT PDSERVE_ENGINE_ONLY)
  # Protobuf: module mode (Debian ships no protobuf-config.cmake). gRPC's config calls it too.
  find_package(Protobuf REQUIRED)
  find_package(gRPC CONFIG REQUIRED)
  find_package(ucx CONFIG REQUIRED)
  find_package(prometheus-cpp CONFIG REQUIRED)
  find_package(yaml-cpp CONFIG REQUIRED)
  find_package(OpenSSL REQUIRED)
  # Boost.Beast and Boost.Asio (header-only, libboost-dev 1.74): the router's HTTP front.
  find_package(Boost 1.74 REQUIRED)  # libssl-dev; gRPC links it too. Certificate checks (grpc_security).
  # OpenBLAS's CMake config defines no target; FindBLAS with the vendor pinned does.
  set(BLA_VENDOR OpenBLAS)
  find_package(BLAS REQUIRED)
  if(PDSERVE_BUILD_BENCH)
    find_package(benchmark CONFIG REQUIRED)
  endif()
  # yaml-cpp 0.7 in Debian exports the target as "yaml-cpp" without a namespace.
  if(TARGET yaml-cpp::yaml-cpp)
    set(PDSERVE_YAML_TARGET yaml-cpp::yaml-cpp)
  else()
    set(PDSERVE_YAML_TARGET yaml-cpp)
  endif()
endif()

find_package(absl CONFIG REQUIRED)
find_package(nlohmann_json CONFIG REQUIRED)
find_package(Threads REQUIRED)
# Google Highway (libhwy-dev 1.0.3): portable SIMD with per-target code in one source.
find_package(hwy CONFIG REQUIRED)
find_package(PkgConfig REQUIRED)
# RE2: gRPC's config already defines re2::re2 (via its Findre2 module and pkg-config).
if(NOT TARGET re2::re2)
  pkg_check_modules(RE2 REQUIRED IMPORTED_TARGET re2)
  add_library(re2::re2 ALIAS PkgConfig::RE2)
endif()
# utf8proc (Unicode normalization for tokenizers that declare NFC): pkg-config only.
pkg_check_modules(UTF8PROC REQUIRED IMPORTED_TARGET libutf8proc)

if(PDSERVE_BUILD_TESTS)
  find_package(GTest CONFIG REQUIRED)
  include(GoogleTest)
endif()
