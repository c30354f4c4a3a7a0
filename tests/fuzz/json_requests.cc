// The JSON documents the host side turns into requests and records: a client's "exec"
// (CommandRequest) and "execute" (CellRequest) frames, the spec the CLI hands a
// supervisor, a sandbox's state file (SandboxRecord), and `--env K=V`. The input is the
// frame's payload, tried as each of them.
//
// Checks: a request that is accepted is one the supervisor can act on (a command name, an
// absolute cwd, a deadline in (0, 1 day]) and survives to_json/from_json; a record or a
// spec of any shape gives a value or an error, never an exception (their callers catch
// none); a request of the wrong shape throws at most nlohmann's exceptions, which the
// supervisor catches and answers.
#include <cstdint>
#include <string>
#include <string_view>

#include "runtime/core/command.h"
#include "runtime/core/state_store.h"
#include "runtime/supervisor/kernel_session.h"
#include "runtime/core/sandbox_spec.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using nsbox::protocol::Json;

void command_request(const Json& j) {
  auto r = nsbox::CommandRequest::from_json(j);
  if (!r) return;
  FUZZ_CHECK(!r->argv.empty() && !r->argv[0].empty());
  FUZZ_CHECK(r->cwd.empty() || r->cwd[0] == '/');  // "": the sandbox's workspace root
  FUZZ_CHECK(r->cwd.empty() == (!j.contains("cwd") || j["cwd"].is_null()));
  FUZZ_CHECK(r->timeout_s > 0 && r->timeout_s <= 86400);
  auto again = nsbox::CommandRequest::from_json(r->to_json());
  FUZZ_CHECK(again && again->to_json() == r->to_json());
  (void)nsbox::command_environment({{"A", "b"}}, r->env);
}

void cell_request(const Json& j) {
  auto r = nsbox::CellRequest::from_json(j);
  if (!r) return;
  FUZZ_CHECK(r->timeout_s > 0 && r->timeout_s <= 86400);
  FUZZ_CHECK(r->output_limit <= (64u << 20));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  (void)nsbox::parse_env_assignment(std::string(text));

  Json j = nsbox::fuzz::parse_json(text);
  if (j.is_discarded()) return 0;

  try {
    command_request(j);
  } catch (const Json::exception&) {
  }
  try {
    cell_request(j);
  } catch (const Json::exception&) {
  }

  if (auto record = nsbox::SandboxRecord::from_json(j)) {
    auto again = nsbox::SandboxRecord::from_json(record->to_json());
    FUZZ_CHECK(again && again->to_json() == record->to_json());
  }
  if (auto launch = nsbox::LaunchEnvelope::from_json(j)) {
    auto again = nsbox::LaunchEnvelope::from_json(launch->to_json());
    FUZZ_CHECK(again && again->to_json() == launch->to_json());
  }
  return 0;
}
