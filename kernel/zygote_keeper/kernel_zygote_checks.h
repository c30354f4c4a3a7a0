// Whether a running kernel zygote is still the one to keep (kernel/zygote_keeper/kernel_zygote_process.h
// asks both on its beat): a file it runs from replaced on disk, and a ping that tells a
// zygote that serves from one alive but wedged.
#pragma once

#include <sys/types.h>

#include <string>

#include "isolation/sys/error.h"
#include "isolation/sys/unique_fd.h"

namespace nsbox::kernel_zygote {

// A file the process `pid` runs from that was replaced since it mapped it (its binary
// after an install of another build, libpython or glibc after a host update): its path,
// or "". Replaced: mapped "(deleted)", and its path now names another inode (a shared
// anonymous mapping or a file only unlinked shows "(deleted)" too, with no file there).
// Read from the host's mount namespace: the zygote's own has /home, /tmp... covered.
std::string replaced_file(pid_t pid);

// A ping to the zygote listening at `socket_path` (a Request with kPingMagic and no fds,
// which a zygote that serves answers with kPong at once): the connection, readable once
// answered. Fails when the zygote's backlog is full (EAGAIN): it does not accept.
Result<UniqueFd> send_ping(const std::string& socket_path);

}  // namespace nsbox::kernel_zygote
