// Copies a stream into a file and hashes exactly the bytes written, at about the speed of
// the kernel's own copy (what `cp` gets from copy_file_range). The bytes go source ->
// pipe -> file by splice, never through user memory; a second thread hashes what has
// landed by mapping the file's pages, so hashing (SHA-NI: ~1.6 GiB/s) and copying
// overlap and neither copies the data again. A source splice cannot read (a terminal,
// say) takes a read/write loop instead, hashing each chunk beside its write.
//
// On success the data is on disk (fsync'ed: the flush overlaps the end of the hashing).
// `dest` must be open for reading as well as writing (the hasher maps it).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "isolation/sys/error.h"

namespace nsbox {

struct HashedCopy {
  uint64_t bytes = 0;
  std::string sha256;
};

struct HashedCopyErrors {
  std::function<Error(int err)> read;   // the source failed with errno `err`
  std::function<Error(int err)> write;  // the destination did (ENOSPC: the quota)
  std::function<Error()> too_large;     // more than max_bytes arrived
};

Result<HashedCopy> hashed_copy(int source, int dest, uint64_t max_bytes, const HashedCopyErrors& errors);

}  // namespace nsbox
