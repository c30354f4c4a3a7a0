// Signals as users name them: "TERM", "SIGTERM", "term" or "15". One parser for the API,
// the CLI and the supervisor, so that each refuses the same things with the same words.
#pragma once

#include <string>
#include <string_view>

#include "isolation/sys/error.h"
#include "runtime/protocol/frame.h"

namespace nsbox {

// A signal number from 1 to 64 (SIGRTMAX) from a name or a number; anything else is an
// invalid_argument naming what was given and what is accepted.
Result<int> parse_signal(std::string_view text);
// The same from JSON: a string as above, or an integer.
Result<int> parse_signal(const protocol::Json& value);
// "TERM" for 15; the number as text for a signal without a short name.
std::string signal_name(int signal);

}  // namespace nsbox
