// How a zygote kernel comes to own the zygote's pages (docs/kernel-zygote.md, "The
// zygote's pages"; docs/design.md, "Kernel zygote"). A fork shares every writable page
// copy-on-write, and a kernel writes nearly all of the interpreter's (reference counts):
// one fault, copy and TLB flush per page, the largest cost of a zygote kernel's start.
// Two remedies, the second taken only where the first left pages shared:
//   - in the zygote, once: its present writable pages pinned (an io_uring buffer
//     registration), and Linux copies a pinned page into the child at the fork itself
//     (it cannot leave it shared: the pin's holder may write it behind the mm's back), in
//     one pass with no fault and no flush;
//   - in each kernel: what is still shared copied at once, MADV_POPULATE_WRITE over the
//     present runs.
#pragma once

#include <cstddef>
#include <string>

#include "isolation/sys/error.h"
#include "isolation/sys/unique_fd.h"

namespace nsbox::kernel {

struct PinnedPages {
  UniqueFd ring;  // the registration lives as long as this fd: keep it for the zygote's life
  size_t bytes = 0;
  size_t runs = 0;
};

// Pins every present page of the process's private writable mappings (those under 1 GiB:
// larger ones are reservations). Call once, in the zygote, after its imports and before
// its first fork. Needs io_uring (Linux >= 5.1; not disabled by kernel.io_uring_disabled
// or a filter) and, without CAP_IPC_LOCK, RLIMIT_MEMLOCK room; the error says which.
Result<PinnedPages> pin_present_writable_pages();

// In a kernel right after the fork: makes what it still shares with the zygote its own
// (MADV_POPULATE_WRITE, Linux >= 5.14; before, those pages stay copy-on-write). Pages the
// fork copied already cost a page-table walk each.
void copy_shared_writable_pages();

}  // namespace nsbox::kernel
