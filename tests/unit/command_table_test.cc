// `nsbox help` and `nsbox CMD --help` come from the table the parser uses: every flag a
// command accepts is documented, and every documented flag is accepted.
#include <catch2/catch.hpp>

#include "cli/command_table.h"

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
