#include "runtime/supervisor/terminal.h"

#include <fcntl.h>

#include <string>
#include <utility>

namespace nsbox {

Result<winsize> window_of(const protocol::Json& r) {
  winsize w{};
  w.ws_col = 80;
  w.ws_row = 24;
  for (auto [key, slot] : {std::pair{"cols", &w.ws_col}, std::pair{"rows", &w.ws_row}}) {
    auto it = r.find(key);
    if (it == r.end()) continue;
    if (!it->is_number_unsigned() || it->get<uint64_t>() == 0 || it->get<uint64_t>() > kMaxTerminalDimension)
      return fail(make_error(ErrorCode::kInvalidArgument,
                             std::string(key) + " must be a number from 1 to " + std::to_string(kMaxTerminalDimension)));
    *slot = static_cast<unsigned short>(it->get<uint64_t>());
  }
  return w;
}

Result<Terminal> open_terminal(UniqueFd master, const winsize& window) {
  int unlock = 0;
  if (::ioctl(master.get(), TIOCSPTLCK, &unlock) != 0) return fail(sys_error("unlock the terminal (TIOCSPTLCK)"));
  if (::ioctl(master.get(), TIOCSWINSZ, &window) != 0) return fail(sys_error("set the window size (TIOCSWINSZ)"));
  // The slave by the master, not by a path in the sandbox's /dev/pts.
  UniqueFd slave(::ioctl(master.get(), TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC));
  if (!slave) return fail(sys_error("open the terminal's slave (TIOCGPTPEER)"));
  return Terminal{std::move(master), std::move(slave)};
}

}  // namespace nsbox
