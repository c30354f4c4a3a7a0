// Secrets in memory (keys, credentials, the texts that carried them): overwritten where
// they were before the memory goes back, so a later read of freed memory (a core dump, a
// bug) finds nothing.
#pragma once

#include <string.h>

#include <string>

namespace nsbox::sys {

// Overwrites `s` (explicit_bzero: not optimised away) and empties it, its memory given back.
inline void wipe(std::string& s) {
  ::explicit_bzero(s.data(), s.size());
  s.clear();
  s.shrink_to_fit();
}

}  // namespace nsbox::sys
