// A process's resident memory, as the kernel reports it (/proc/PID/status, VmRSS): what the
// benchmarks and the leak checks of the fault suite measure a process by.
#ifndef PDSERVE_COMMON_PROCESS_MEMORY_H_
#define PDSERVE_COMMON_PROCESS_MEMORY_H_

#include <sys/types.h>

#include <cstdint>

namespace pdserve {

// The resident set of process `pid` in bytes; -1 when the process is gone or /proc does not
// say (a kernel without VmRSS, a process of another user's namespace).
int64_t ResidentSetBytes(pid_t pid);

}  // namespace pdserve

#endif  // PDSERVE_COMMON_PROCESS_MEMORY_H_
