// Starting a daemon from a large, many-threaded process (nsbox serve starting supervisors)
// without copying its address space: clone(CLONE_VM | CLONE_VFORK) on stacks of its own,
// as posix_spawn does. fork() would copy the caller's page tables twice (a daemon is a
// grandchild), tear both copies down again, and leave every page the caller writes next
// to be copied on write (docs/performance.md, "Cold creates, fourth pass"; docs/design.md, "Processes").
#pragma once

#include <span>

namespace nsbox::sys {

// Runs fn(arg) in a child that shares the caller's memory (CLONE_VM | CLONE_VFORK) on
// `stack` (the caller's, 16-byte aligned), with every signal blocked: no handler of the
// caller's runs on that stack or in that memory. It has its own fd table, root, cwd and
// namespaces. The calling thread waits until the child has exited (the caller's other
// threads go on running: fn may make system calls only, no allocation, no lock; a
// single-threaded caller, paused, may let it do more: kernel/zygote/zygote_server.cc) and gets
// its wait status; -1 with errno if the clone failed. `extra_flags`: more of clone's
// (CLONE_FILES: the child's new descriptors are the caller's).
int vfork_call(int (*fn)(void*), void* arg, std::span<char> stack, int extra_flags = 0);

// Runs `path` with `argv` and `envp` as a daemon: in a new session, a grandchild of the
// caller that init (or the nearest subreaper) adopts, with `fds[i]` as its fd i (-1:
// /dev/null; at most 8), every other fd closed, every signal's action the default and
// none blocked. Returns 0 once the program has been exec'd, or has failed to be (it then
// exits with status 127 and its fds close: the caller sees EOF); -1 with errno if either
// clone failed (a process limit: EAGAIN). Between clone and exec only async-signal-safe
// calls run, every signal blocked until the program's own actions are in place.
int spawn_daemon(const char* path, char* const argv[], char* const envp[], std::span<const int> fds);

}  // namespace nsbox::sys
