// Network modes: `none` (a namespace of its own with only loopback, up) and `host`.
#pragma once

#include <string_view>

#include "isolation/sys/error.h"

namespace nsbox::network {

enum class Mode { kNone, kHost };

Result<Mode> parse_mode(std::string_view name);
std::string_view mode_name(Mode mode);
int clone_flags(Mode mode);

// In the child, inside its new network namespace: brings `lo` up.
Result<void> setup_in_child(Mode mode);

}  // namespace nsbox::network
