// A small argument reader: flags with values (`--size large` or `--size=large`), boolean
// flags, positionals, and everything after `--` kept as the command.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "isolation/sys/error.h"

namespace nsbox::cli {

struct ParsedArgs {
  std::map<std::string, std::vector<std::string>> values;  // --flag VALUE (repeatable)
  std::set<std::string> switches;                           // --flag
  std::vector<std::string> positionals;
  std::vector<std::string> command;  // after --
  bool has_command = false;

  bool has(const std::string& flag) const { return switches.count(flag) || values.count(flag); }
  std::string value(const std::string& flag, const std::string& fallback = "") const;
};

struct FlagSpec {
  std::set<std::string> with_value;
  std::set<std::string> switches;
};

// Unknown flags are errors that name the flag; `--json` and `--root` are known everywhere.
Result<ParsedArgs> parse_args(const std::vector<std::string>& words, const FlagSpec& spec);

}  // namespace nsbox::cli
