#include "runtime/protocol/unix_socket.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>

#include "isolation/sys/syscall.h"

namespace nsbox::protocol {
namespace {

// Fills `addr` for `path`, opening the parent directory into `dir` when the path is long.
Result<socklen_t> address_for(const std::string& path, sockaddr_un& addr, UniqueFd& dir) {
  addr = {};
  addr.sun_family = AF_UNIX;
  std::string usable = path;
  if (path.size() >= sizeof addr.sun_path) {
    auto slash = path.rfind('/');
    dir.reset(::open(path.substr(0, slash).c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!dir) return fail(sys_error("open directory of " + path));
    usable = "/proc/self/fd/" + std::to_string(dir.get()) + path.substr(slash);
  }
  std::memcpy(addr.sun_path, usable.c_str(), usable.size() + 1);
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + usable.size() + 1);
}

}  // namespace

Result<UniqueFd> listen_unix(const std::string& path, int type) {
  sockaddr_un addr;
  UniqueFd dir;
  socklen_t len = NSBOX_TRY(address_for(path, addr, dir));
  UniqueFd fd(::socket(AF_UNIX, type | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) return fail(sys_error("socket(AF_UNIX)"));
  ::unlink(path.c_str());
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0) return fail(sys_error("bind " + path));
  if (::listen(fd.get(), 64) != 0) return fail(sys_error("listen on " + path));
  return fd;
}

Result<UniqueFd> connect_unix(const std::string& path, int type) {
  sockaddr_un addr;
  UniqueFd dir;
  socklen_t len = NSBOX_TRY(address_for(path, addr, dir));
  UniqueFd fd(::socket(AF_UNIX, type | SOCK_CLOEXEC, 0));
  if (!fd) return fail(sys_error("socket(AF_UNIX)"));
  if (sys::retry_eintr([&] { return ::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), len); }) != 0)
    return fail(sys_error("connect to " + path));
  return fd;
}

}  // namespace nsbox::protocol
