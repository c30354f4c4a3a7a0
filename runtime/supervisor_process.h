// Starting a sandbox's supervisor as a daemon and waiting for its first word.
#pragma once

#include <string>

#include "runtime/protocol/frame.h"
#include "runtime/state_store.h"

namespace nsbox {

// Double-forks (the supervisor is re-parented away from the caller and in a session of
// its own), execs `supervisor_path`, writes `spec` to its stdin and waits, bounded, for
// the one JSON line it prints once the sandbox is up or failed.
Result<protocol::Json> spawn_supervisor(const std::string& supervisor_path, const StateRoot& root,
                                        const protocol::Json& spec);

}  // namespace nsbox
