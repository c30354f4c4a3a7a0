// Copies a stream into a file and hashes exactly the bytes written, at about the speed of
// the kernel's own copy (what `cp` gets from copy_file_range). The bytes go source ->
// pipe -> file by splice, never through user memory; a second thread hashes what has
// landed by mapping the file's pages, so hashing (SHA-NI: ~1.7 GiB/s) and copying
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
  std::string what;                     // names the copy in its own errors: "the upload of data.csv"
  std::function<Error(int err)> read;   // the source failed with errno `err`
  std::function<Error(int err)> write;  // the destination did (ENOSPC: the quota)
  std::function<Error()> too_large;     // more than max_bytes arrived
};

// Who can reach `dest` while the copy runs. Only a private file (an unnamed O_TMPFILE)
// may be hashed by mapping it: a file others can write could change under the hash, or
// be truncated under the mapping (SIGBUS). A shared one is hashed from the buffer that
// is written, by read/write.
enum class DestAccess { kPrivate, kShared };

Result<HashedCopy> hashed_copy(int source, int dest, DestAccess access, uint64_t max_bytes, const HashedCopyErrors& errors);

}  // namespace nsbox
