// Starting a sandbox's supervisor as a daemon and waiting for its first word.
#pragma once

#include <string>

#include "runtime/protocol/frame.h"
#include "runtime/core/state_store.h"

namespace nsbox {

// Double-forks (the supervisor is re-parented away from the caller and in a session of
// its own), execs `supervisor_path`, writes `spec` to its stdin and waits up to
// `timeout_ms` for the one JSON line it prints once the sandbox is up or failed.
//
// The supervisor gets only PATH, HOME, LANG, LC_*, TZ and NSBOX_* of the caller's
// environment: the rest (AWS_SECRET_ACCESS_KEY and its like above all) would live on in
// it and in every process it starts, for the sandbox's whole life.
Result<protocol::Json> spawn_supervisor(const std::string& supervisor_path, const StateRoot& root,
                                        const protocol::Json& spec, int timeout_ms);

}  // namespace nsbox
