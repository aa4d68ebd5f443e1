#include "common/zero_pages.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace pdserve {

size_t ZeroResidentPages(void* base, size_t bytes) {
  if (bytes == 0) return 0;
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(base);
  const uintptr_t end = begin + bytes;
  const uintptr_t first_page = begin / page * page;
  const size_t pages = (end - first_page + page - 1) / page;
  std::vector<unsigned char> resident(pages);
  if (mincore(reinterpret_cast<void*>(first_page), end - first_page, resident.data()) != 0) {
    std::memset(base, 0, bytes);
    return bytes;
  }
  size_t written = 0;
  for (size_t i = 0; i < pages;) {
    if ((resident[i] & 1) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < pages && (resident[j] & 1) != 0) ++j;  // A run of resident pages: one memset.
    const uintptr_t from = std::max(begin, first_page + i * page);
    const uintptr_t to = std::min(end, first_page + j * page);
    std::memset(reinterpret_cast<void*>(from), 0, to - from);
    written += to - from;
    i = j;
  }
  return written;
}

}  // namespace pdserve
