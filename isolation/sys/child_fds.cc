#include "isolation/sys/child_fds.h"

#include <fcntl.h>
#include <unistd.h>

#include "isolation/sys/syscall.h"

namespace nsbox::sys {

bool arrange_child_fds(std::initializer_list<int> sources) {
  constexpr size_t kMax = 8;
  if (sources.size() > kMax) return false;
  int null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  int high[kMax];
  size_t count = 0;
  for (int fd : sources) high[count++] = ::fcntl(fd < 0 ? null_fd : fd, F_DUPFD_CLOEXEC, static_cast<int>(kMax) + 2);
  for (size_t i = 0; i < count; ++i)
    if (high[i] < 0 || ::dup2(high[i], static_cast<int>(i)) < 0) return false;
  return close_range(static_cast<unsigned>(count), ~0U, 0) == 0;
}

}  // namespace nsbox::sys
