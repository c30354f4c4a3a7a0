#include "runtime/core/signal_names.h"

#include <signal.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <utility>

namespace nsbox {
namespace {

constexpr int kMaxSignal = 64;  // SIGRTMAX on Linux

constexpr std::array<std::pair<std::string_view, int>, 20> kNames = {{
    {"HUP", SIGHUP},   {"INT", SIGINT},     {"QUIT", SIGQUIT}, {"ILL", SIGILL},     {"TRAP", SIGTRAP},
    {"ABRT", SIGABRT}, {"BUS", SIGBUS},     {"FPE", SIGFPE},   {"KILL", SIGKILL},   {"USR1", SIGUSR1},
    {"SEGV", SIGSEGV}, {"USR2", SIGUSR2},   {"PIPE", SIGPIPE}, {"ALRM", SIGALRM},   {"TERM", SIGTERM},
    {"CHLD", SIGCHLD}, {"CONT", SIGCONT},   {"STOP", SIGSTOP}, {"TSTP", SIGTSTP},   {"WINCH", SIGWINCH},
}};

Error refused(std::string_view text) {
  return make_error(ErrorCode::kInvalidArgument, "'" + std::string(text.substr(0, 32)) + "' is not a signal",
                    "give a name such as TERM, KILL, INT, HUP, USR1 (SIG prefix optional) or a number from 1 to 64");
}

}  // namespace

Result<int> parse_signal(std::string_view text) {
  int number = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), number);
  if (ec == std::errc() && end == text.data() + text.size()) {
    if (number < 1 || number > kMaxSignal) return fail(refused(text));
    return number;
  }
  std::string upper(text.size() > 16 ? text.substr(0, 16) : text);
  std::transform(upper.begin(), upper.end(), upper.begin(), [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  std::string_view name = upper;
  if (name.starts_with("SIG")) name.remove_prefix(3);
  for (const auto& [known, signal] : kNames)
    if (known == name && text.size() <= 16) return signal;
  return fail(refused(text));
}

Result<int> parse_signal(const protocol::Json& value) {
  if (value.is_number_integer()) {
    auto n = value.get<int64_t>();
    if (n < 1 || n > kMaxSignal) return fail(refused(std::to_string(n)));
    return static_cast<int>(n);
  }
  if (value.is_string()) return parse_signal(std::string_view(value.get_ref<const std::string&>()));
  return fail(make_error(ErrorCode::kInvalidArgument, "\"signal\" must be a name such as \"TERM\" or a number from 1 to 64"));
}

std::string signal_name(int signal) {
  for (const auto& [name, number] : kNames)
    if (number == signal) return std::string(name);
  return std::to_string(signal);
}

}  // namespace nsbox
