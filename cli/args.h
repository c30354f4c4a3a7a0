// A small argument reader: flags with values (`--size large` or `--size=large`), boolean
// flags, positionals, and everything after `--` kept as the command. Also what a flag is
// declared as (FlagHelp): the CLI's command table (cli/command_table.h) and nsbox-server
// (cli/serve_flags.h) take what they accept from such declarations.
#pragma once

#include <expected>
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

struct FlagHelp {
  const char* name;   // without the dashes; one letter for a short flag (-c)
  const char* value;  // what the value is ("SIZE"), or nullptr for a switch
  const char* help;
  // A create flag that sets one of the spec's plain fields (runtime/core/sandbox_spec.h):
  // the field's name in the create document. The flag's value goes there as the field's
  // type wants it (a switch is true; digits are a number).
  const char* field = nullptr;
};

FlagSpec flag_spec(const std::vector<FlagHelp>& flags);

// A word the reader refused, as given ("--frob=1"; for a missing value, the flag), and
// why ("unknown option --frob").
struct RefusedWord {
  std::string word;
  std::string message;
};

// Unknown flags are refused; `--json` and `--root` are known everywhere.
std::expected<ParsedArgs, RefusedWord> read_args(const std::vector<std::string>& words, const FlagSpec& spec);
// read_args with a refusal as a usage error that names the flag.
Result<ParsedArgs> parse_args(const std::vector<std::string>& words, const FlagSpec& spec);

}  // namespace nsbox::cli
