// A call made in a forked child, for what only a process with other credentials can do:
// a multithreaded process can neither join a user namespace nor make one (setns and
// unshare refuse it), a child of it can. The child runs the work and hands back its
// answer (bytes and at most one fd) or its Error, as if the call had been the caller's.
//
// The child is a copy of the caller: it must not take a lock another thread may have held
// at the fork (no logging); malloc is safe (glibc resets its locks across fork). It dies
// with the caller, and it never execs, so the fds it inherited go with it.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>

#include "isolation/sys/error.h"
#include "isolation/sys/unique_fd.h"

namespace nsbox::sys {

struct ChildAnswer {
  std::string bytes;
  UniqueFd fd;  // -1: none
};

struct ChildCall {
  // In the child, first (optional): make or join what the work needs. Then, while the
  // child waits, `in_parent` with its pid (optional): what only the caller can do for it
  // (newuidmap writes the maps of a namespace the child made).
  std::function<Result<void>()> prepare;
  std::function<Result<void>(pid_t child)> in_parent;
  // In the child: the call itself.
  std::function<Result<ChildAnswer>()> work;
  // The answer's bytes past this are refused (the child is the caller's own code, but its
  // answer may carry a sandbox's names).
  size_t max_bytes = 16 << 20;
  // What the call is, for its errors: "act as bob in sandbox X".
  std::string what;
};

Result<ChildAnswer> call_in_child(const ChildCall& call);

// True in a child of call_in_child: a call it makes that would fork again runs in place.
bool in_called_child();

}  // namespace nsbox::sys
