#include "kernel/zygote_keeper/kernel_zygote_checks.h"

#include <sys/socket.h>
#include <sys/stat.h>

#include <fstream>
#include <sstream>
#include <string_view>

#include "runtime/protocol/kernel_zygote.h"
#include "runtime/protocol/unix_socket.h"

namespace nsbox::kernel_zygote {

std::string replaced_file(pid_t pid) {
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  constexpr std::string_view kDeleted = " (deleted)";
  for (std::string line; std::getline(maps, line);) {
    auto path = line.find(" /");
    if (path == std::string::npos || !line.ends_with(kDeleted)) continue;
    std::istringstream fields(line);
    std::string range, perms, offset, device;
    unsigned long inode = 0;
    fields >> range >> perms >> offset >> device >> inode;
    std::string name = line.substr(path + 1, line.size() - path - 1 - kDeleted.size());
    struct stat now{};
    if (::stat(name.c_str(), &now) == 0 && now.st_ino != inode) return name;
  }
  return {};
}

Result<UniqueFd> send_ping(const std::string& socket_path) {
  auto connection = NSBOX_TRY(protocol::connect_unix(socket_path, SOCK_SEQPACKET | SOCK_NONBLOCK));
  Request ping;
  ping.magic = kPingMagic;
  if (::send(connection.get(), &ping, sizeof ping, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof ping))
    return fail(sys_error("send a ping to the kernel zygote"));
  return connection;
}

}  // namespace nsbox::kernel_zygote
