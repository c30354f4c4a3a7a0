// In a child between fork and exec: the fds it is to have, and nothing else.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <initializer_list>
#include <span>

namespace nsbox::sys {

// `sources[i]` becomes fd i (-1: /dev/null there); every other fd is closed. Each source is
// first copied above the targets: a dup2 of an fd onto itself (a pipe end that already is
// fd 0, or 3) would leave it O_CLOEXEC, and it would close at exec. False on a failure
// (the child should _exit).
bool arrange_child_fds(std::span<const int> sources);
inline bool arrange_child_fds(std::initializer_list<int> sources) {
  return arrange_child_fds(std::span<const int>(sources.begin(), sources.size()));
}

// In a child between fork and exec (async-signal-safe): every signal's action the
// default, and none blocked. A signal that comes before the exec (a stop right after a
// start) then does what it does to the program, never runs the parent's handler.
void default_signals();
// The signals (bit sig-1) ignored or caught now, from /proc/self/status; all of them
// where it cannot be read. Async-signal-safe.
uint64_t signals_not_default();

// In a child (async-signal-safe): dies with `parent`, the pid the parent had before fork,
// and _exits at once if that parent is already gone (which PR_SET_PDEATHSIG set after
// fork would never notice).
void die_with_parent(pid_t parent);

// In a child between fork and exec (async-signal-safe): dies with `parent`, the pid the
// parent had before fork (and _exits at once if that parent is already gone, which
// PR_SET_PDEATHSIG set after fork would never notice); puts `sources[i]` at fd i (-1:
// /dev/null), at most 8 of them; closes every other fd; gives every signal its default
// action and unblocks it.
void prepare_child(pid_t parent, std::span<const int> sources);

// fork() with every signal blocked across it, as posix_spawn does; the parent's mask is
// restored in the parent, and the child keeps them blocked until prepare_child has given
// them their default actions: a signal that comes at once (a stop right after a start)
// never runs a handler of the parent's in the child.
pid_t fork_child();
inline void prepare_child(pid_t parent, std::initializer_list<int> sources) {
  prepare_child(parent, std::span<const int>(sources.begin(), sources.size()));
}

}  // namespace nsbox::sys
