# ThreadSanitizer sees a lock only when the code that takes it is instrumented. Debian's
# Abseil is built without TSan, so absl::Mutex (every lock in pdserve, and gRPC's) would be
# invisible and every access it orders reported as a race. For the TSan build, Abseil's
# synchronization sources, from Debian's own source package of the installed version
# (scripts/build.sh tsan fetches it), are compiled with TSan and linked into every
# executable; their definitions take precedence over libabsl_synchronization.so's for the
# whole process, gRPC's calls included.
set(PDSERVE_TSAN_ABSEIL_SOURCE "" CACHE PATH "Abseil source tree matching the installed headers (TSan builds)")
if(NOT PDSERVE_TSAN_ABSEIL_SOURCE)
  message(FATAL_ERROR "PDSERVE_TSAN needs PDSERVE_TSAN_ABSEIL_SOURCE (scripts/build.sh tsan sets it)")
endif()
set(_absl ${PDSERVE_TSAN_ABSEIL_SOURCE}/absl/synchronization)
add_library(pdserve_tsan_absl OBJECT
  ${_absl}/barrier.cc
  ${_absl}/blocking_counter.cc
  ${_absl}/internal/create_thread_identity.cc
  ${_absl}/internal/graphcycles.cc
  ${_absl}/internal/per_thread_sem.cc
  ${_absl}/internal/waiter.cc
  ${_absl}/mutex.cc
  ${_absl}/notification.cc)
# The installed headers (Debian's inline namespace), not the source tree's.
target_include_directories(pdserve_tsan_absl BEFORE PRIVATE /usr/include)
target_compile_options(pdserve_tsan_absl PRIVATE -w)
