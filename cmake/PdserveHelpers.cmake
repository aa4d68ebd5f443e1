# Helpers that give every pdserve target the same warnings and layout.

set(PDSERVE_WARNING_FLAGS -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers)
if(PDSERVE_WERROR)
  list(APPEND PDSERVE_WARNING_FLAGS -Werror)
endif()
# The lock annotations (ABSL_GUARDED_BY, ...), which GCC ignores: clang checks them on every
# first-party file it compiles (scripts/check_thread_safety.sh does the same without a build).
if(PDSERVE_THREAD_SAFETY)
  list(APPEND PDSERVE_WARNING_FLAGS -Wthread-safety -Werror=thread-safety)
endif()

# Applies pdserve's compile options to a target we own (never to generated code).
function(pdserve_target_options target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${PDSERVE_WARNING_FLAGS}>)
  target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>)
endfunction()

# TSan builds: every executable gets the instrumented Abseil synchronization objects
# (PdserveTsanAbseil.cmake).
function(pdserve_tsan_objects target)
  if(PDSERVE_TSAN)
    target_sources(${target} PRIVATE $<TARGET_OBJECTS:pdserve_tsan_absl>)
  endif()
endfunction()

# pdserve_library(NAME SOURCES a.cc b.cc DEPS lib1 lib2 [PRIVATE_DEPS ...])
function(pdserve_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_link_libraries(${name} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  pdserve_target_options(${name})
endfunction()

# pdserve_binary(NAME SOURCES main.cc DEPS ...): lands in build/bin/.
function(pdserve_binary name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS})
  pdserve_target_options(${name})
  pdserve_tsan_objects(${name})
endfunction()

# pdserve_test(NAME SOURCES a_test.cc DEPS ... [LABELS unit|integration] [TIMEOUT s]
#              [DATA_DEPS targets that must be built first, e.g. binaries the test starts]
#              [FIXTURE ctest fixture every test of the binary requires])
# Registers every TEST() with CTest through gtest_discover_tests. Test binaries land in
# build/bin/ with the rest. Labels: "unit" (runs under the sanitizer build in CI),
# "integration" (multi-process) or "gpu" (needs a GPU; reported skipped without one).
function(pdserve_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT;FIXTURE" "SOURCES;DEPS;LABELS;DATA_DEPS" ${ARGN})
  if(NOT ARG_LABELS)
    set(ARG_LABELS unit)
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 120)
  endif()
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gmock GTest::gtest_main)
  pdserve_target_options(${name})
  pdserve_tsan_objects(${name})
  # Where tests find the binaries they start and the fixtures they read.
  target_compile_definitions(${name} PRIVATE
    PDSERVE_BIN_DIR="${CMAKE_BINARY_DIR}/bin"
    PDSERVE_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
    PDSERVE_BUILD_DIR="${CMAKE_BINARY_DIR}")
  if(ARG_DATA_DEPS)
    add_dependencies(${name} ${ARG_DATA_DEPS})
  endif()
  if("unit" IN_LIST ARG_LABELS)
    set_property(GLOBAL APPEND PROPERTY PDSERVE_UNIT_TEST_TARGETS ${name})
  endif()
  set(_props LABELS "${ARG_LABELS}" TIMEOUT ${ARG_TIMEOUT})
  # A test that needs a GPU skips itself without one (GTEST_SKIP); CTest must count that as
  # skipped, not passed.
  if("gpu" IN_LIST ARG_LABELS)
    list(APPEND _props SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]")
  endif()
  if(ARG_FIXTURE)
    list(APPEND _props FIXTURES_REQUIRED ${ARG_FIXTURE})
  endif()
  gtest_discover_tests(${name}
    DISCOVERY_MODE PRE_TEST
    DISCOVERY_TIMEOUT 60
    PROPERTIES ${_props})
endfunction()
