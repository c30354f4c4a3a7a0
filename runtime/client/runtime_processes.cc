// The client side of processes that outlive a request (runtime/supervisor/processes.h):
// each call one request to the sandbox's supervisor, which owns the processes.
#include "runtime/client/runtime.h"

namespace nsbox {

using protocol::Json;

namespace {

Json without_ok(Json answer) {
  answer.erase("ok");
  return answer;
}

Json pid_request(const char* op, int64_t pid) { return {{"op", op}, {"pid", pid}}; }

}  // namespace

Result<int64_t> Runtime::process_start(const std::string& id_or_name, const ProcessStart& start) const {
  std::string id = NSBOX_TRY(store_.resolve(id_or_name));
  Json env = Json::object();
  for (const auto& [k, v] : start.env) env[k] = v;
  Json m = {{"op", "proc_start"}, {"argv", start.argv}, {"env", env}, {"tty", start.tty}, {"cols", start.cols}, {"rows", start.rows}};
  if (!start.cwd.empty()) m["cwd"] = start.cwd;
  if (!start.run_as.empty()) m["run_as"] = start.run_as;
  auto r = NSBOX_TRY(request(id, m, kRequestTimeoutMs));
  return r.value("pid", int64_t{0});
}

Result<Json> Runtime::processes(const std::string& id_or_name) const {
  std::string id = NSBOX_TRY(store_.resolve(id_or_name));
  auto r = NSBOX_TRY(request(id, {{"op", "proc_list"}}, kRequestTimeoutMs));
  return r.value("processes", Json::array());
}

Result<Json> Runtime::process_read(const std::string& id_or_name, int64_t pid, const ProcessRead& read) const {
  std::string id = NSBOX_TRY(store_.resolve(id_or_name));
  Json m = pid_request("proc_read", pid);
  m["offset"] = read.offset;
  m["stderr_offset"] = read.stderr_offset;
  m["wait_ms"] = read.wait_ms;
  if (read.max_bytes) m["max_bytes"] = read.max_bytes;
  return without_ok(NSBOX_TRY(request(id, m, kRequestTimeoutMs + static_cast<int>(read.wait_ms))));
}

Result<Json> Runtime::process_write(const std::string& id_or_name, int64_t pid, const std::string& data, bool eof) const {
  std::string id = NSBOX_TRY(store_.resolve(id_or_name));
  Json m = pid_request("proc_write", pid);
  protocol::put_bytes(m, data);
  m["eof"] = eof;
  return without_ok(NSBOX_TRY(request(id, m, kRequestTimeoutMs)));
}

Result<Json> Runtime::process_signal(const std::string& id_or_name, int64_t pid, int signal) const {
  std::string id = NSBOX_TRY(store_.resolve(id_or_name));
  Json m = pid_request("proc_signal", pid);
  m["signal"] = signal;
  return without_ok(NSBOX_TRY(request(id, m, kRequestTimeoutMs)));
}

Result<void> Runtime::process_remove(const std::string& id_or_name, int64_t pid) const {
  std::string id = NSBOX_TRY(store_.resolve(id_or_name));
  NSBOX_CHECK(request(id, pid_request("proc_remove", pid), kRequestTimeoutMs));
  return {};
}

}  // namespace nsbox
