// cgroup v1 (legacy and hybrid hosts): one directory per controller, nsjail-style.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "isolation/cgroup_drivers.h"
#include "isolation/sys/files.h"
#include "isolation/sys/syscall.h"

namespace nsbox::cgroup {

Result<std::vector<pid_t>> read_procs(const std::string& dir) {
  auto text = NSBOX_TRY(files::read_file(dir + "/cgroup.procs", 16 << 20));
  std::vector<pid_t> pids;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    if (end > pos) pids.push_back(static_cast<pid_t>(std::stol(text.substr(pos, end - pos))));
    pos = end + 1;
  }
  return pids;
}

// SIGKILLs the processes of `dir`. A pid read from cgroup.procs may be reused by the time
// we act on it: open a pidfd first, then act only on pids still listed afterwards (a pid
// reused by a host process is not in our cgroup).
void kill_members(const std::string& dir, const std::vector<pid_t>& pids) {
  std::vector<std::pair<pid_t, UniqueFd>> opened;
  for (pid_t pid : pids)
    if (UniqueFd fd(sys::pidfd_open(pid, 0)); fd) opened.emplace_back(pid, std::move(fd));
  auto still = read_procs(dir);
  if (!still) return;
  for (auto& [pid, fd] : opened)
    if (std::find(still->begin(), still->end(), pid) != still->end())
      ::syscall(SYS_pidfd_send_signal, fd.get(), SIGKILL, nullptr, 0);
}

Result<void> kill_and_remove(const std::string& dir) {
  // Empty already, as after a command's end (its pid namespace went with its pid 1), or
  // gone: one syscall, not a read of its members first.
  if (::rmdir(dir.c_str()) == 0 || errno == ENOENT) return {};
  // Bounded: a sandbox that cannot be emptied in 10 s is reported, never waited on forever.
  using namespace std::chrono;
  auto deadline = steady_clock::now() + seconds(10);
  auto pause = microseconds(200);
  for (;;) {
    auto pids = read_procs(dir);
    if (pids && pids->empty() && ::rmdir(dir.c_str()) == 0) return {};
    if (pids) kill_members(dir, *pids);
    if (!pids && pids.error().sys_errno == ENOENT) return {};
    if (steady_clock::now() > deadline) {
      int err = errno;
      return fail(sys_error("remove cgroup " + dir + " (processes still in it after 10 s)", err));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, microseconds(20000));
  }
}

Result<void> make_cgroup_dir(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return fail(sys_error("mkdir cgroup " + dir));
  return {};
}

namespace {

class CgroupV1 final : public Driver {
 public:
  explicit CgroupV1(Placement p) : placement_(std::move(p)) {}

  const Placement& placement() const override { return placement_; }

  Result<void> create() override {
    for (const auto& dir : placement_.dirs) NSBOX_CHECK(make_cgroup_dir(dir));
    return {};
  }

  Result<void> apply(const Limits& limits) override {
    const std::string& mem = dir_of("memory");
    const std::string memsw = mem + "/memory.memsw.limit_in_bytes";
    std::string bytes = std::to_string(limits.memory_bytes);
    // memsw must stay >= limit: raise memsw first when growing, lower limit first when
    // shrinking. Without swap accounting memsw does not exist and the host has no swap
    // to give, so memory.limit_in_bytes alone holds.
    auto current = files::read_file(mem + "/memory.limit_in_bytes");
    bool growing = current && std::stoull(*current) < limits.memory_bytes;
    bool has_memsw = files::exists(memsw);
    if (growing && has_memsw) NSBOX_CHECK(write_limit(memsw, bytes));
    NSBOX_CHECK(write_limit(mem + "/memory.limit_in_bytes", bytes));
    if (!growing && has_memsw) NSBOX_CHECK(write_limit(memsw, bytes));
    NSBOX_CHECK(write_limit(mem + "/memory.swappiness", "0"));
    NSBOX_CHECK(write_limit(dir_of("pids") + "/pids.max", std::to_string(limits.pids)));
    // Quota per the default 100 ms period of a new cgroup: N vCPUs = N periods' worth.
    NSBOX_CHECK(write_limit(dir_of("cpu") + "/cpu.cfs_quota_us", std::to_string(100000ull * limits.vcpus)));
    return {};
  }

  Result<void> set_cpu_weight(unsigned weight) override {
    uint64_t shares = weight <= 1 ? 2 : uint64_t{weight} * 1024 / 100;  // the least is 2
    return write_limit(dir_of("cpu") + "/cpu.shares", std::to_string(shares));
  }

  Result<Join> open_join() const override {
    Join join;
    for (const auto& dir : placement_.dirs) {
      UniqueFd fd(::open((dir + "/tasks").c_str(), O_WRONLY | O_CLOEXEC));
      if (!fd) return fail(sys_error("open " + dir + "/tasks"));
      join.self_tasks.push_back(std::move(fd));
    }
    return join;
  }

  Result<uint64_t> oom_kills() const override {
    auto text = NSBOX_TRY(files::read_file(dir_of("memory") + "/memory.oom_control"));
    return parse_keyed_value(text, "oom_kill");
  }

  Result<uint64_t> memory_usage() const override {
    auto text = NSBOX_TRY(files::read_file(dir_of("memory") + "/memory.usage_in_bytes"));
    return std::stoull(text);
  }

  Result<void> destroy() override {
    Result<void> result;
    for (const auto& dir : placement_.dirs)
      if (auto r = kill_and_remove(dir); !r && result) result = r;
    return result;
  }

  std::vector<View> views() const override {
    std::vector<View> v;
    for (size_t i = 0; i < placement_.dirs.size(); ++i)
      v.push_back({placement_.dirs[i], "/sys/fs/cgroup/" + placement_.controllers[i]});
    return v;
  }

 private:
  const std::string& dir_of(std::string_view controller) const {
    for (size_t i = 0; i < placement_.controllers.size(); ++i)
      if (placement_.controllers[i] == controller) return placement_.dirs[i];
    return placement_.dirs.front();
  }

  static Result<void> write_limit(const std::string& file, const std::string& value) {
    return files::write_file(file, value);
  }

  Placement placement_;
};

}  // namespace

std::unique_ptr<Driver> make_v1_driver(Placement placement) {
  return std::make_unique<CgroupV1>(std::move(placement));
}

}  // namespace nsbox::cgroup
