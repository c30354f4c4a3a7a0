// A call made in a forked child, for what only a process with other credentials can do:
// a multithreaded process can neither join a user namespace nor make one (setns and
// unshare refuse it), a child of it can. The child runs the work and hands back its
// answer (bytes and at most one fd) or its Error, as if the call had been the caller's.
//
// The child is a copy of the caller: it must not take a lock another thread may have held
// at the fork (no logging); malloc is safe (glibc resets its locks across fork). It keeps
// only the fds the call names (and 0-2), is not dumpable, dies with the caller (the work
// calls rearm_parent_death() after any change of its ids, which clears that), and never
// execs. A child that outlives `timeout_ms` is killed.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

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
  // In the child: the call itself. It may ask the caller once or more (ask_caller()),
  // which runs `on_ask` in the caller, with what the caller's other threads know.
  std::function<Result<ChildAnswer>()> work;
  std::function<Result<void>()> on_ask;
  // The fds the child keeps besides 0-2 and its channel: what the work uses.
  std::vector<int> keep_fds;
  // The answer's bytes past this are refused as a limit (the child is the caller's own
  // code, but its answer may carry a sandbox's names).
  size_t max_bytes = 16 << 20;
  int timeout_ms = 600'000;
  // What the call is, for its errors: "act as bob on /workspace/x".
  std::string what;
};

Result<ChildAnswer> call_in_child(const ChildCall& call);

// True in a child of call_in_child: a call it makes that would fork again runs in place.
bool in_called_child();
// In such a child, after it changed its ids (which clears the parent-death signal): dies
// with the caller again, or fails if the caller is gone already.
Result<void> rearm_parent_death();
// In such a child: runs the call's on_ask in the caller and returns its answer.
Result<void> ask_caller();

}  // namespace nsbox::sys
