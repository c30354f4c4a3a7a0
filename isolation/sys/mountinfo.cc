#include "isolation/sys/mountinfo.h"

#include <sstream>

#include "isolation/sys/files.h"

namespace nsbox::sys {

std::string unescape_mount_field(const std::string& field) {
  std::string out;
  out.reserve(field.size());
  for (size_t i = 0; i < field.size(); ++i) {
    auto octal = [&](size_t k) { return k < field.size() && field[k] >= '0' && field[k] <= '7'; };
    if (field[i] == '\\' && octal(i + 1) && octal(i + 2) && octal(i + 3)) {
      out += static_cast<char>(((field[i + 1] - '0') << 6) | ((field[i + 2] - '0') << 3) | (field[i + 3] - '0'));
      i += 3;
    } else {
      out += field[i];
    }
  }
  return out;
}

std::vector<MountInfo> parse_mountinfo(const std::string& text) {
  std::vector<MountInfo> out;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream f(line);
    std::string id, parent, devno, root, mount_point, options, field;
    if (!(f >> id >> parent >> devno >> root >> mount_point >> options)) continue;
    while (f >> field && field != "-") {}  // optional fields, up to the separator
    MountInfo m;
    std::string source;
    if (field != "-" || !(f >> m.fs_type >> source >> m.super_options)) continue;
    m.root = unescape_mount_field(root);
    m.mount_point = unescape_mount_field(mount_point);
    m.source = unescape_mount_field(source);
    out.push_back(std::move(m));
  }
  return out;
}

Result<std::vector<MountInfo>> own_mounts() {
  return parse_mountinfo(NSBOX_TRY(files::read_file("/proc/self/mountinfo", 16 << 20)));
}

}  // namespace nsbox::sys
