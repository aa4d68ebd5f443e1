// Zeroing large fresh allocations without touching them. A KV pool of gigabytes comes from a
// new mapping (mmap, a shared-memory segment, or malloc's mmap for large blocks), whose pages
// the kernel fills with zeros on first touch; writing zeros into every page instead makes the
// whole pool resident at start (an idle worker holding gigabytes it has not used) and costs
// seconds on a loaded machine. ZeroResidentPages zeroes only the pages already resident
// (mincore): those an allocator may have handed back dirty.
// Caveat: a page of a reused heap block that was swapped out is not resident and not zeroed;
// pools are fresh mappings (and our machines run without swap).
// Thread-safety: reentrant.
#ifndef PDSERVE_COMMON_ZERO_PAGES_H_
#define PDSERVE_COMMON_ZERO_PAGES_H_

#include <cstddef>

namespace pdserve {

// Zeroes the resident pages of [base, base + bytes) (every byte when mincore fails). Returns
// the bytes it wrote.
size_t ZeroResidentPages(void* base, size_t bytes);

}  // namespace pdserve

#endif  // PDSERVE_COMMON_ZERO_PAGES_H_
