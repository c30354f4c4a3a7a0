// The process's own private, writable mappings, from /proc/self/maps: what a merging
// kernel offers to KSM (kernel/kernel_main.cc) and what a zygote's child copies at once
// (kernel/zygote/zygote_child.cc).
#pragma once

#include <functional>
#include <string_view>

namespace nsbox::kernel {

struct Mapping {
  void* start;
  unsigned long length;
  bool anonymous;         // no file behind it: the heap, the arenas, a thread's stack
  std::string_view name;  // "[heap]", "[stack]", a file's path, or empty
};

// Each "rw-p" mapping but the kernel's own ([vvar], [vdso]); nothing when /proc is not there.
void for_each_private_writable_mapping(const std::function<void(const Mapping&)>& visit);

}  // namespace nsbox::kernel
