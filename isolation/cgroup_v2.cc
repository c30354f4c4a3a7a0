// cgroup v2 (unified hosts): one directory, limits in memory.max / pids.max / cpu.max.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <sstream>

#include "isolation/cgroup_drivers.h"
#include "isolation/sys/files.h"

namespace nsbox::cgroup {
namespace {

constexpr std::string_view kControllers[] = {"memory", "pids", "cpu"};

// Enables our controllers for the children of `dir` where they are not enabled yet.
Result<void> enable_controllers(const std::string& dir) {
  auto available = NSBOX_TRY(files::read_file(dir + "/cgroup.controllers"));
  auto enabled = NSBOX_TRY(files::read_file(dir + "/cgroup.subtree_control"));
  auto listed = [](const std::string& text, std::string_view name) {
    std::istringstream s(text);
    std::string w;
    while (s >> w)
      if (w == name) return true;
    return false;
  };
  std::string request;
  for (auto c : kControllers) {
    if (!listed(available, c))
      return fail(make_error(ErrorCode::kUnsupported,
                             "cgroup v2 controller " + std::string(c) + " is not available in " + dir,
                             "delegate memory, pids and cpu to this subtree"));
    if (!listed(enabled, c)) request += (request.empty() ? "+" : " +") + std::string(c);
  }
  if (request.empty()) return {};
  return files::write_file(dir + "/cgroup.subtree_control", request);
}

class CgroupV2 final : public Driver {
 public:
  explicit CgroupV2(Placement p) : placement_(std::move(p)) {}

  const Placement& placement() const override { return placement_; }

  Result<void> create() override {
    // The parent (the root cgroup, or the delegated subtree) holds no process of ours
    // and may enable controllers for its children (the "no internal processes" rule);
    // on systemd hosts they are enabled already and this writes nothing.
    const std::string& dir = placement_.dirs.front();
    NSBOX_CHECK(enable_controllers(dir.substr(0, dir.rfind('/'))));
    return make_cgroup_dir(dir);
  }

  Result<void> apply(const Limits& limits) override {
    const std::string& dir = placement_.dirs.front();
    NSBOX_CHECK(files::write_file(dir + "/memory.max", std::to_string(limits.memory_bytes)));
    if (files::exists(dir + "/memory.swap.max")) NSBOX_CHECK(files::write_file(dir + "/memory.swap.max", "0"));
    NSBOX_CHECK(files::write_file(dir + "/pids.max", std::to_string(limits.pids)));
    NSBOX_CHECK(files::write_file(dir + "/cpu.max", std::to_string(100000ull * limits.vcpus) + " 100000"));
    return {};
  }

  Result<void> set_cpu_weight(unsigned weight) override {
    return files::write_file(placement_.dirs.front() + "/cpu.weight", std::to_string(std::clamp(weight, 1u, 10000u)));
  }

  Result<Join> open_join() const override {
    Join join;
    join.clone_into.reset(::open(placement_.dirs.front().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!join.clone_into) return fail(sys_error("open cgroup " + placement_.dirs.front()));
    return join;
  }

  Result<uint64_t> oom_kills() const override {
    auto text = NSBOX_TRY(files::read_file(placement_.dirs.front() + "/memory.events"));
    return parse_keyed_value(text, "oom_kill");
  }

  Result<uint64_t> memory_usage() const override {
    auto text = NSBOX_TRY(files::read_file(placement_.dirs.front() + "/memory.current"));
    return std::stoull(text);
  }

  Result<void> destroy() override {
    const std::string& dir = placement_.dirs.front();
    // cgroup.kill (5.14+) kills the whole subtree atomically, even a process forking fast.
    if (files::exists(dir + "/cgroup.kill")) (void)files::write_file(dir + "/cgroup.kill", "1");
    return kill_and_remove(dir);
  }

  std::vector<View> views() const override { return {{placement_.dirs.front(), "/sys/fs/cgroup"}}; }

 private:
  Placement placement_;
};

}  // namespace

std::unique_ptr<Driver> make_v2_driver(Placement placement) {
  return std::make_unique<CgroupV2>(std::move(placement));
}

}  // namespace nsbox::cgroup
