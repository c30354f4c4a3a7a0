#include <catch2/catch.hpp>

#include "cli/args.h"

using namespace nsbox;

TEST_CASE("flags take values in both spellings, repeat, and stop at --") {
  auto a = cli::parse_args({"etl", "--size=large", "--env", "A=1", "--env", "B=2", "--json", "--", "ls", "--size"},
                           {{"size", "env"}, {}});
  REQUIRE(a);
  CHECK(a->positionals == std::vector<std::string>{"etl"});
  CHECK(a->value("size") == "large");
  CHECK(a->values.at("env") == std::vector<std::string>{"A=1", "B=2"});
  CHECK(a->has("json"));
  CHECK(a->has_command);
  CHECK(a->command == std::vector<std::string>{"ls", "--size"});
}

TEST_CASE("unknown flags and missing values are usage errors that name the flag") {
  auto unknown = cli::parse_args({"--frobnicate"}, {});
  REQUIRE_FALSE(unknown);
  CHECK(unknown.error().message == "unknown option --frobnicate");
  auto missing = cli::parse_args({"--size"}, {{"size"}, {}});
  REQUIRE_FALSE(missing);
  CHECK(missing.error().message == "--size needs a value");
  CHECK_FALSE(cli::parse_args({"--json=1"}, {}));
}
