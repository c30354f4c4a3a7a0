// `nsbox help` and `nsbox CMD --help` come from the table the parser uses: every flag a
// command accepts is documented, and every documented flag is accepted.
#include <catch2/catch.hpp>

#include "cli/command_table.h"
#include "cli/serve_flags.h"

using namespace nsbox::cli;

TEST_CASE("every command's flags are in its help, and its help's flags parse") {
  for (const auto& c : command_table()) {
    INFO(c.name);
    std::string usage = c.usage();
    for (const auto& f : c.flags) {
      std::string word = (std::string(f.name).size() == 1 ? "-" : "--") + std::string(f.name);
      CHECK(usage.find(word) != std::string::npos);
      std::vector<std::string> args = {word};
      if (f.value) args.push_back("x");
      CHECK(parse_args(args, c.spec()));
    }
    CHECK(general_help().find(std::string("  ") + c.name + " ") != std::string::npos);
    CHECK_FALSE(parse_args({"--no-such-flag"}, c.spec()));
  }
}

TEST_CASE("the flags that were missing from the old help are there") {
  std::string all;
  for (const auto& c : command_table()) all += c.usage();
  for (const char* flag : {"--mount", "--manifest", "--output-limit", "--limit", "--cursor", "--force", "--keep-files", "--b64"})
    CHECK(all.find(flag) != std::string::npos);
  CHECK(find_command("list") == find_command("ls"));
  CHECK(find_command("nope") == nullptr);
  CHECK(find_command("sh")->passes_exit_status);
  CHECK_FALSE(find_command("create")->passes_exit_status);
}

TEST_CASE("nsbox serve's help and nsbox-server's reader take the same flags, from one declaration") {
  const CommandHelp* serve = find_command("serve");
  REQUIRE(serve);
  REQUIRE(serve->flags.size() == serve_flags().size());
  std::string synopsis = serve_synopsis();
  for (size_t i = 0; i < serve_flags().size(); ++i) {
    const FlagHelp& f = serve_flags()[i];
    INFO(f.name);
    CHECK(std::string(serve->flags[i].name) == f.name);
    CHECK(synopsis.find(std::string("[--") + f.name + (f.value ? " " + std::string(f.value) : "") + "]") != std::string::npos);
  }
  CHECK(synopsis.starts_with("nsbox serve [--socket PATH] [--listen ADDR:PORT] [--allow-remote] "));
}

TEST_CASE("the reader says which word it refused, as it was given") {
  FlagSpec spec = flag_spec(serve_flags());
  auto unknown = read_args({"--socket", "s", "--frob=1"}, spec);
  REQUIRE_FALSE(unknown);
  CHECK(unknown.error().word == "--frob=1");
  CHECK(unknown.error().message == "unknown option --frob");
  auto missing = read_args({"--listen"}, spec);
  REQUIRE_FALSE(missing);
  CHECK(missing.error().word == "--listen");
  CHECK(missing.error().message == "--listen needs a value");
  auto valued_switch = read_args({"--allow-remote=yes"}, spec);
  REQUIRE_FALSE(valued_switch);
  CHECK(valued_switch.error().word == "--allow-remote=yes");
}
