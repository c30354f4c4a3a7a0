// SandboxFs's answers as a child that made the call sends them back (sys::ChildAnswer:
// bytes and at most one fd), and read again: rootless, a call as another account runs in
// such a child (runtime/client/sandbox_fs.h).
#pragma once

#include <sys/stat.h>

#include "isolation/sys/error.h"
#include "isolation/sys/files.h"
#include "isolation/sys/forked_call.h"
#include "isolation/sys/unique_fd.h"

namespace nsbox::fs_answers {

sys::ChildAnswer pack(Result<void>&&);
sys::ChildAnswer pack(uint64_t n);
sys::ChildAnswer pack(UniqueFd fd);
sys::ChildAnswer pack(const struct stat& st);
sys::ChildAnswer pack(const files::DirPage& page);

// The answer as the call's type; a malformed one is an internal error.
template <class T>
Result<T> unpack(sys::ChildAnswer&& a);
template <>
Result<void> unpack(sys::ChildAnswer&& a);
template <>
Result<uint64_t> unpack(sys::ChildAnswer&& a);
template <>
Result<UniqueFd> unpack(sys::ChildAnswer&& a);
template <>
Result<struct stat> unpack(sys::ChildAnswer&& a);
template <>
Result<files::DirPage> unpack(sys::ChildAnswer&& a);

}  // namespace nsbox::fs_answers
