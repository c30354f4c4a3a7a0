// In a child between fork and exec: the fds it is to have, and nothing else.
#pragma once

#include <initializer_list>

namespace nsbox::sys {

// `sources[i]` becomes fd i (-1: /dev/null there); every other fd is closed. Each source is
// first copied above the targets: a dup2 of an fd onto itself (a pipe end that already is
// fd 0, or 3) would leave it O_CLOEXEC, and it would close at exec. False on a failure
// (the child should _exit).
bool arrange_child_fds(std::initializer_list<int> sources);

}  // namespace nsbox::sys
