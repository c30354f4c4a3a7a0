#include "kernel/private_mappings.h"

#include <cstdio>
#include <cstring>
#include <string>

namespace nsbox::kernel {

void for_each_private_writable_mapping(const std::function<void(const Mapping&)>& visit) {
  FILE* maps = std::fopen("/proc/self/maps", "re");
  if (!maps) return;
  char line[512];
  while (std::fgets(line, sizeof line, maps)) {
    unsigned long from = 0, to = 0, offset = 0, inode = 0;
    char perms[5] = {}, dev[16] = {};
    int name_at = 0;
    if (std::sscanf(line, "%lx-%lx %4s %lx %15s %lu %n", &from, &to, perms, &offset, dev, &inode, &name_at) < 6) continue;
    std::string_view name(line + name_at);
    if (name.ends_with('\n')) name.remove_suffix(1);
    if (std::strcmp(perms, "rw-p") != 0 || name.starts_with("[v")) continue;
    bool anonymous = inode == 0 && (name.empty() || name.starts_with("["));
    visit({reinterpret_cast<void*>(from), to - from, anonymous, name});
  }
  std::fclose(maps);
}

}  // namespace nsbox::kernel
