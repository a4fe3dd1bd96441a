// apps/poseidon/allocator.h: the C library's allocator, tuned for a process that simulates.
//
// A simulation's message, flow and event arrays grow by doubling to hundreds of MiB and are
// freed and grown again; glibc maps every block above its mmap threshold (128 KiB at first) with
// fresh pages and hands the heap's free top back to the kernel past 128 KiB, so each growth
// touches pages the kernel must zero and fault in again. KeepFreedMemoryForReuse keeps blocks up
// to 32 MiB in the heap and trims it only past 1 GiB free: a 1,024-worker AlexNet iteration
// takes 25% fewer page faults (107 k -> 81 k; docs/performance.md). Outputs are unchanged (the
// allocator decides no order). `simulate`, `sweep` and `plan` call it; the live commands do not.
#pragma once

namespace poseidon::app {

void KeepFreedMemoryForReuse();

}  // namespace poseidon::app
