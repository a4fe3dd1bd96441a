#include "apps/poseidon/allocator.h"

#include <cstdlib>  // defines __GLIBC__ where the C library is glibc

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace poseidon::app {

void KeepFreedMemoryForReuse() {
#if defined(__GLIBC__)
  // 32 MiB is glibc's largest mmap threshold on 64-bit hosts; a failed call leaves the default.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

}  // namespace poseidon::app
