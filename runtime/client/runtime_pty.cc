// The client side of PTY sessions (runtime/supervisor/processes.h; a session is a process
// with a terminal): each call one request to the sandbox's supervisor.
#include "runtime/client/runtime.h"

namespace nsbox {

using protocol::Json;

Json PtyOutput::to_json() const {
  Json j = {{"session_id", session_id}, {"exit_code", exit_code ? Json(*exit_code) : Json(nullptr)}};
  if (protocol::is_valid_utf8(output)) j["output"] = output;
  else j["output_b64"] = protocol::base64_encode(output);
  if (dropped) j["dropped"] = dropped;
  return j;
}

namespace {

PtyOutput pty_output_from(const Json& m) {
  PtyOutput o;
  o.session_id = m.value("session_id", uint64_t{0});
  if (auto it = m.find("output_b64"); it != m.end() && it->is_string()) o.output = protocol::base64_decode(it->get<std::string>()).value_or("");
  else o.output = m.value("output", "");
  if (auto it = m.find("exit_code"); it != m.end() && it->is_number_integer()) o.exit_code = it->get<int>();
  o.dropped = m.value("dropped", uint64_t{0});
  return o;
}

}  // namespace

Result<uint64_t> Runtime::pty_start(const std::string& id_or_name, const PtyStart& start) const {
  std::string id = NSBOX_TRY(store_.resolve(id_or_name));
  Json env = Json::object();
  for (const auto& [k, v] : start.env) env[k] = v;
  Json m = {{"op", "pty_start"}, {"argv", start.argv}, {"cols", start.cols}, {"rows", start.rows}, {"env", env}};
  if (!start.cwd.empty()) m["cwd"] = start.cwd;
  if (!start.run_as.empty()) m["run_as"] = start.run_as;
  auto r = NSBOX_TRY(request(id, m, kRequestTimeoutMs));
  return r.value("session_id", uint64_t{0});
}

Result<PtyOutput> Runtime::pty_write(const std::string& id_or_name, uint64_t session, const std::string& chars, uint64_t yield_ms) const {
  std::string id = NSBOX_TRY(store_.resolve(id_or_name));
  Json m = {{"op", "pty_write"}, {"session_id", session}, {"yield_ms", yield_ms}};
  if (protocol::is_valid_utf8(chars)) m["chars"] = chars;
  else m["chars_b64"] = protocol::base64_encode(chars);
  return pty_output_from(NSBOX_TRY(request(id, m, kRequestTimeoutMs + static_cast<int>(yield_ms))));
}

Result<void> Runtime::pty_type(const std::string& id_or_name, uint64_t session, const std::string& chars) const {
  std::string id = NSBOX_TRY(store_.resolve(id_or_name));
  Json m = {{"op", "pty_write"}, {"session_id", session}, {"yield_ms", 0}, {"take_output", false}};
  if (protocol::is_valid_utf8(chars)) m["chars"] = chars;
  else m["chars_b64"] = protocol::base64_encode(chars);
  NSBOX_CHECK(request(id, m, kRequestTimeoutMs));
  return {};
}

Result<PtyOutput> Runtime::pty_read(const std::string& id_or_name, uint64_t session, uint64_t yield_ms, bool early) const {
  std::string id = NSBOX_TRY(store_.resolve(id_or_name));
  Json m = {{"op", "pty_read"}, {"session_id", session}, {"yield_ms", yield_ms}, {"early", early}};
  return pty_output_from(NSBOX_TRY(request(id, m, kRequestTimeoutMs + static_cast<int>(yield_ms))));
}

Result<void> Runtime::pty_resize(const std::string& id_or_name, uint64_t session, unsigned cols, unsigned rows) const {
  std::string id = NSBOX_TRY(store_.resolve(id_or_name));
  NSBOX_CHECK(request(id, {{"op", "pty_resize"}, {"session_id", session}, {"cols", cols}, {"rows", rows}}, kRequestTimeoutMs));
  return {};
}

Result<std::vector<uint64_t>> Runtime::pty_kill(const std::string& id_or_name, uint64_t session) const {
  std::string id = NSBOX_TRY(store_.resolve(id_or_name));
  Json m = session ? Json{{"op", "pty_kill"}, {"session_id", session}} : Json{{"op", "pty_kill"}, {"all", true}};
  auto r = NSBOX_TRY(request(id, m, kRequestTimeoutMs));
  return r.value("killed", std::vector<uint64_t>{});
}

}  // namespace nsbox
