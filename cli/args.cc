#include "cli/args.h"

namespace nsbox::cli {

std::string ParsedArgs::value(const std::string& flag, const std::string& fallback) const {
  auto it = values.find(flag);
  return it == values.end() || it->second.empty() ? fallback : it->second.back();
}

FlagSpec flag_spec(const std::vector<FlagHelp>& flags) {
  FlagSpec s;
  for (const auto& f : flags) (f.value ? s.with_value : s.switches).insert(f.name);
  return s;
}

std::expected<ParsedArgs, RefusedWord> read_args(const std::vector<std::string>& words, const FlagSpec& spec) {
  ParsedArgs out;
  auto refuse = [](std::string word, std::string message) { return std::unexpected(RefusedWord{std::move(word), std::move(message)}); };
  for (size_t i = 0; i < words.size(); ++i) {
    const std::string& w = words[i];
    if (w == "--") {
      out.has_command = true;
      out.command.assign(words.begin() + static_cast<long>(i) + 1, words.end());
      break;
    }
    bool short_flag = w.size() == 2 && w[0] == '-' && w[1] != '-';  // -c VALUE
    if (!short_flag && (w.size() < 3 || w.compare(0, 2, "--") != 0)) {
      out.positionals.push_back(w);
      continue;
    }
    std::string dashes = short_flag ? "-" : "--";
    std::string flag = w.substr(dashes.size()), value;
    bool inline_value = false;
    if (auto eq = flag.find('='); eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
      inline_value = true;
    }
    if (flag == "json" || spec.switches.count(flag)) {
      if (inline_value) return refuse(w, "--" + flag + " takes no value");
      out.switches.insert(flag);
    } else if (flag == "root" || spec.with_value.count(flag)) {
      if (!inline_value) {
        if (i + 1 >= words.size() || words[i + 1] == "--") return refuse(w, dashes + flag + " needs a value");
        value = words[++i];
      }
      out.values[flag].push_back(value);
    } else {
      return refuse(w, "unknown option " + dashes + flag);
    }
  }
  return out;
}

Result<ParsedArgs> parse_args(const std::vector<std::string>& words, const FlagSpec& spec) {
  auto read = read_args(words, spec);
  if (!read) return fail(make_error(ErrorCode::kInvalidArgument, std::move(read.error().message), "see `nsbox help`"));
  return std::move(*read);
}

}  // namespace nsbox::cli
