"""What the benchmarks share about the page cache.

How nsbox's binary got into the page cache changes a one-shot's time on a VM whose page
faults are dear: against a fresh copy of the same binary, it ran ~11 % slower as the linker
left it and ~4.5 % slower faulted in by exec (docs/performance.md). bwrap and its libraries
are in the state exec leaves already.
"""
import os


def as_after_boot(path):
    """Drops the file's pages from the page cache, so that its next exec faults it in as after a
    boot, whatever wrote it last (the linker, a copy)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)  # dirty pages are not dropped
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
