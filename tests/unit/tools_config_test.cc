// The tool bridge's configuration and the pure parts of the bridge: what a config may
// say, where its keys come from (and that nothing saved holds them), who may name host
// files for it, and how a recording is replayed.
#include <catch2/catch.hpp>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "runtime/client/create_options.h"
#include "runtime/toolbridge/local_tools.h"
#include "runtime/toolbridge/tape.h"
#include "runtime/toolbridge/tool_router.h"
#include "runtime/core/tools_config.h"

using namespace nsbox;
using nlohmann::json;

TEST_CASE("a tools config names its backend, or a directory or recording says it, and every field is checked") {
  auto dir = ToolsConfig::from_json({{"tools_dir", "/srv/tools"}});
  REQUIRE(dir);
  CHECK(dir->backend == ToolsBackend::kDir);
  auto replay = ToolsConfig::from_json({{"replay_file", "/tmp/calls.jsonl"}});
  REQUIRE(replay);
  CHECK(replay->backend == ToolsBackend::kReplay);
  CHECK(ToolsConfig::from_json({{"backend", "composio"}})->backend == ToolsBackend::kComposio);
  CHECK(!ToolsConfig().enabled());
  CHECK(ToolsConfig::from_json({{"llm_url", "http://127.0.0.1:1/v1"}})->enabled());
  // What a sandbox is told to run on the remote survives the saved form.
  auto remote = ToolsConfig::from_json({{"backend", "composio"}, {"llm_tool", "LLM_CHAT"}, {"extract_tool", "EXTRACT"}});
  REQUIRE(remote);
  auto again = ToolsConfig::from_json(remote->to_json());
  REQUIRE(again);
  CHECK(again->llm_tool == "LLM_CHAT");
  CHECK(again->extract_tool == "EXTRACT");

  for (const json& bad : {json{{"backend", "magic"}}, json{{"tools_dir", "relative/dir"}}, json{{"backend", "dir"}},
                          json{{"backend", "replay"}}, json{{"llm_url", "file:///etc/passwd"}},
                          json{{"base_url", "gopher://x"}}, json{{"max_in_flight", 0}}, json{{"max_in_flight", 100000}},
                          json{{"call_timeout_s", -1}}, json{{"execute_path", "/no/slug/here"}}, json{{"api_key", "k"}},
                          json{{"user_id", 7}}, json{{"extract_tool", 1}}, json("composio")}) {
    INFO(bad.dump());
    auto parsed = ToolsConfig::from_json(bad);
    REQUIRE(!parsed);
    CHECK(parsed.error().code == ErrorCode::kMalformedRequest);
  }
}

TEST_CASE("the composio backend takes its key from the environment, and no saved form of the config holds it") {
  const std::string key = "ck-distinctive-7f3a9e";
  ToolsConfig config = *ToolsConfig::from_json({{"backend", "composio"}, {"llm_url", "http://127.0.0.1:9/v1"}});
  auto keys = resolve_tool_keys(config, {{"COMPOSIO_API_KEY", key}, {"COMPOSIO_BASE_URL", "http://127.0.0.1:9"},
                                         {"OPENAI_API_KEY", "sk-other-1234"}});
  REQUIRE(keys);
  CHECK(keys->composio_api_key == key);
  CHECK(keys->llm_api_key == "sk-other-1234");
  CHECK(config.base_url == "http://127.0.0.1:9");
  CHECK(config.to_json().dump().find(key) == std::string::npos);
  CHECK(config.to_json().dump().find("sk-other") == std::string::npos);
  // NSBOX_LLM_API_KEY wins over OPENAI_API_KEY.
  CHECK(resolve_tool_keys(config, {{"COMPOSIO_API_KEY", key}, {"NSBOX_LLM_API_KEY", "mine"}, {"OPENAI_API_KEY", "theirs"}})
            ->llm_api_key == "mine");
  keys->wipe();
  CHECK(keys->composio_api_key.empty());

  ToolsConfig no_key = *ToolsConfig::from_json({{"backend", "composio"}});
  auto missing = resolve_tool_keys(no_key, {});
  REQUIRE(!missing);
  CHECK(missing.error().hint.find("COMPOSIO_API_KEY") != std::string::npos);
}

TEST_CASE("an API caller names host files for the tools only under the server's NSBOX_TOOLS_ROOT") {
  auto create = [](const json& tools, const bucket::Environment& env) {
    return create_options_from_json({{"tools", tools}}, env, Caller::kRemote);
  };
  CHECK(!create({{"tools_dir", "/srv/tools"}}, {}));  // no root set: no host path at all
  CHECK(create({{"tools_dir", "/srv/tools/a"}}, {{"NSBOX_TOOLS_ROOT", "/srv/tools"}}));
  auto outside = create({{"record_file", "/etc/cron.d/x"}}, {{"NSBOX_TOOLS_ROOT", "/srv/tools"}});
  REQUIRE(!outside);
  CHECK(outside.error().code == ErrorCode::kPermissionDenied);
  CHECK(!create({{"replay_file", "/srv/tools/../../etc/passwd"}}, {{"NSBOX_TOOLS_ROOT", "/srv/tools"}}));
  CHECK(!create({{"tools_dir", "/srv/toolsX"}}, {{"NSBOX_TOOLS_ROOT", "/srv/tools"}}));
  // The local user's own command may name any path.
  CHECK(create_options_from_json({{"tools", {{"tools_dir", "/srv/tools"}}}}, {}, Caller::kLocal));
}

TEST_CASE("a replay answers a call recorded with its arguments in another order, repeats in order, and says what it lacks") {
  char path[] = "/tmp/nsbox-replay-XXXXXX";
  int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  ::close(fd);
  {
    std::ofstream out(path);
    out << json{{"helper", "run_tool"}, {"args", {{"tool", "T"}, {"arguments", {{"a", 1}, {"b", 2}}}}}, {"result", 1}}.dump() << "\n"
        << json{{"helper", "run_tool"}, {"args", {{"tool", "T"}, {"arguments", {{"a", 1}, {"b", 2}}}}}, {"result", 2}}.dump() << "\n"
        << json{{"helper", "invoke_llm"}, {"args", {{"query", "q"}}}, {"result", nullptr}, {"error", "no"}}.dump() << "\n";
  }
  auto replay = tools::Replay::load(path);
  ::unlink(path);
  REQUIRE(replay);
  // nlohmann keeps object keys sorted: {"b","a"} is {"a","b"}.
  tools::ToolCall call{"run_tool", json::parse(R"({"arguments": {"b": 2, "a": 1}, "tool": "T"})")};
  CHECK(replay->answer(call).result == 1);
  CHECK(replay->answer(call).result == 2);
  CHECK(replay->answer(call).result == 2);  // the last one repeats
  auto err = replay->answer({"invoke_llm", {{"query", "q"}}});
  CHECK(err.error == "no");
  auto missing = replay->answer({"run_tool", {{"tool", "OTHER"}, {"arguments", json::object()}}});
  CHECK(missing.error.find("OTHER: the replay has no recorded answer") == 0);
  CHECK(!tools::Replay::load("/nonexistent/calls.jsonl"));
}

TEST_CASE("meta-tools are told apart in any case, and a tool name can only name a file in the tools directory") {
  CHECK(tools::is_meta_tool("COMPOSIO_REMOTE_WORKBENCH"));
  CHECK(tools::is_meta_tool("composio_search_tools"));
  CHECK(!tools::is_meta_tool("GITHUB_LIST_REPOS"));
  CHECK(tools::is_plain_name("GITHUB_LIST_REPOS"));
  CHECK(tools::is_plain_name("invoke_llm"));
  for (const char* bad : {"", "../x", "a/b", ".hidden", "x y", "a\nb"}) CHECK(!tools::is_plain_name(bad));
  CHECK(!tools::is_plain_name(std::string(129, 'a')));
}
