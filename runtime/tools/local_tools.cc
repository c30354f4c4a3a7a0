#include "runtime/tools/local_tools.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "isolation/sys/child_fds.h"
#include "isolation/sys/syscall.h"
#include "isolation/sys/unique_fd.h"

namespace nsbox::tools {
namespace {

using protocol::Json;
using Clock = std::chrono::steady_clock;

struct Run {
  int status = -1;  // waitpid's
  bool timed_out = false;
  std::string out, err;
  bool out_cut = false;
};

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

// Feeds `input`, collects stdout/stderr (bounded), until the program has closed both and
// exited, or the deadline (then its group is killed).
Run run_program(const std::string& path, const std::string& dir, const std::vector<std::string>& env,
                const std::string& input, double timeout_s) {
  Run run;
  int in[2], out[2], err[2];
  if (::pipe2(in, O_CLOEXEC) != 0) return run;
  UniqueFd in_r(in[0]), in_w(in[1]);
  if (::pipe2(out, O_CLOEXEC) != 0) return run;
  UniqueFd out_r(out[0]), out_w(out[1]);
  if (::pipe2(err, O_CLOEXEC) != 0) return run;
  UniqueFd err_r(err[0]), err_w(err[1]);
  std::vector<char*> envp;
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const char* argv[] = {path.c_str(), nullptr};
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) {
    run.err = "fork: " + std::string(std::strerror(errno));
    return run;
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    sys::prepare_child(parent, {in_r.get(), out_w.get(), err_w.get()});
    if (::chdir(dir.c_str()) != 0) ::_exit(126);
    ::execve(path.c_str(), const_cast<char* const*>(argv), envp.data());
    ::_exit(127);
  }
  in_r.reset();
  out_w.reset();
  err_w.reset();
  for (int fd : {in_w.get(), out_r.get(), err_r.get()}) set_nonblocking(fd);
  const auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  size_t fed = 0;
  if (input.empty()) in_w.reset();
  char buf[65536];
  while (out_r || err_r) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      run.timed_out = true;
      break;
    }
    pollfd fds[3];
    int n = 0;
    if (in_w) fds[n++] = {in_w.get(), POLLOUT, 0};
    if (out_r) fds[n++] = {out_r.get(), POLLIN, 0};
    if (err_r) fds[n++] = {err_r.get(), POLLIN, 0};
    if (sys::retry_eintr([&] { return ::poll(fds, static_cast<nfds_t>(n), static_cast<int>(left)); }) < 0) break;
    for (int i = 0; i < n; ++i) {
      if (!fds[i].revents) continue;
      if (fds[i].fd == in_w.get()) {
        ssize_t w = ::write(in_w.get(), input.data() + fed, input.size() - fed);
        if (w > 0) fed += static_cast<size_t>(w);
        if (w < 0 && errno != EAGAIN) in_w.reset();  // it closed its stdin: fine
        if (fed == input.size()) in_w.reset();
        continue;
      }
      bool is_out = fds[i].fd == out_r.get();
      UniqueFd& fd = is_out ? out_r : err_r;
      ssize_t got = ::read(fd.get(), buf, sizeof buf);
      if (got == 0 || (got < 0 && errno != EAGAIN)) {
        fd.reset();
        continue;
      }
      if (got < 0) continue;
      std::string& sink = is_out ? run.out : run.err;
      size_t cap = is_out ? LocalTools::kMaxStdout : LocalTools::kMaxStderr;
      if (is_out && sink.size() + static_cast<size_t>(got) > cap) {
        run.out_cut = true;
        out_r.reset();
        err_r.reset();
        break;
      }
      // stderr keeps its last bytes: the end of a traceback says most.
      sink.append(buf, static_cast<size_t>(got));
      if (!is_out && sink.size() > cap) sink.erase(0, sink.size() - cap);
    }
  }
  if (run.timed_out || run.out_cut) ::kill(-pid, SIGKILL);
  // Its pipes are closed (or it is killed): the exit is near. Bounded anyway.
  for (int i = 0; i < 200; ++i) {
    pid_t r = ::waitpid(pid, &run.status, WNOHANG);
    if (r == pid) return run;
    if (i == 100) ::kill(-pid, SIGKILL);  // it closed its output but will not end
    ::usleep(10000);
  }
  ::kill(-pid, SIGKILL);
  ::waitpid(pid, &run.status, 0);
  return run;
}

std::vector<std::string> tool_environment(const ToolsConfig& config, const std::string& name) {
  std::vector<std::string> env = {"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8", "NSBOX_TOOL=" + name,
                                  "NSBOX_USER_ID=" + config.user_id};
  if (const char* home = std::getenv("HOME")) env.push_back(std::string("HOME=") + home);
  return env;
}

std::string tail(const std::string& text, size_t n) { return text.size() <= n ? text : "..." + text.substr(text.size() - n); }

}  // namespace

bool is_plain_name(const std::string& name) {
  if (name.empty() || name.size() > 128 || name[0] == '.') return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.';
  });
}

bool LocalTools::has(const std::string& name) const {
  if (!is_plain_name(name)) return false;
  std::string path = config_.tools_dir + "/" + name;
  struct stat st{};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

ToolAnswer LocalTools::run(const std::string& name, const Json& arguments) const {
  if (!has(name))
    return ToolAnswer::failed(name + ": no such tool (no executable " + (is_plain_name(name) ? config_.tools_dir + "/" + name : "of that name") +
                              "); `nsbox tools ls` lists them");
  std::string input = arguments.dump(-1, ' ', false, Json::error_handler_t::replace);
  Run r = run_program(config_.tools_dir + "/" + name, config_.tools_dir, tool_environment(config_, name), input,
                      config_.call_timeout_s);
  if (r.timed_out) return ToolAnswer::failed(name + ": the tool did not finish within " + std::to_string(static_cast<int>(config_.call_timeout_s)) + " s and was killed");
  if (r.out_cut) return ToolAnswer::failed(name + ": the tool printed more than 16 MiB");
  if (r.status < 0) return ToolAnswer::failed(name + ": could not run the tool: " + r.err);
  if (WIFSIGNALED(r.status))
    return ToolAnswer::failed(name + ": the tool was killed by signal " + std::to_string(WTERMSIG(r.status)) + ": " + tail(r.err, 2000));
  if (WEXITSTATUS(r.status) != 0)
    return ToolAnswer::failed(name + ": the tool exited with status " + std::to_string(WEXITSTATUS(r.status)) + ": " + tail(r.err, 2000));
  Json result = Json::parse(r.out, nullptr, false);
  if (result.is_discarded())
    return ToolAnswer::failed(name + ": the tool's output is not JSON: " + r.out.substr(0, 200));
  return ToolAnswer::ok(std::move(result));
}

Json LocalTools::schema(const std::string& name) const {
  if (!is_plain_name(name)) return nullptr;
  std::ifstream in(config_.tools_dir + "/" + name + ".schema.json");
  if (!in) return nullptr;
  std::stringstream text;
  text << in.rdbuf();
  Json schema = Json::parse(text.str(), nullptr, false);
  return schema.is_object() ? schema : Json();
}

Result<Json> LocalTools::list() const {
  DIR* d = ::opendir(config_.tools_dir.c_str());
  if (!d) return fail(sys_error("list the tools in " + config_.tools_dir));
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d))
    if (has(e->d_name)) names.push_back(e->d_name);
  ::closedir(d);
  std::sort(names.begin(), names.end());
  Json items = Json::array();
  for (const auto& n : names) {
    Json item = {{"slug", n}};
    if (Json s = schema(n); !s.is_null()) {
      if (s.contains("description")) item["description"] = s["description"];
      item["input_parameters"] = s;
    }
    items.push_back(std::move(item));
  }
  return items;
}

}  // namespace nsbox::tools
