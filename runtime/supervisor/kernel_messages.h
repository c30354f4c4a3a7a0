// What the kernel may tell the supervisor, checked field by field before any of it
// reaches a client. The kernel runs user code, and a cell can write any frame to the
// kernel's channel (its fd 3): a result with a number where a path goes, a display list
// of a million entries, a progress step of 16 MiB. Clients (the CLI, `nsbox serve`, the
// Python client) then only ever see documents of the shapes docs/protocol.md promises.
#pragma once

#include <optional>
#include <string>

#include "runtime/protocol/frame.h"

namespace nsbox::kernel_messages {

constexpr size_t kMaxDisplayItems = 256;
constexpr size_t kMaxErrorText = 64u << 10;   // each of ename, evalue, traceback
constexpr size_t kMaxProgressText = 1u << 10;  // a step's name or its metric

// Copies the kernel's "result" fields (status, results, results_file_path, error,
// display, execution_count) into `into`, each only if it has the right type, cut to its
// bound (`results_limit` for the value). Returns what was dropped or cut, for the log;
// empty when the result was well formed.
std::string take_result(const protocol::Json& from, protocol::Json& into, size_t results_limit);

// {"current_step": str, "current_step_metric": str|number|null} from a progress
// event, or nullopt when it is malformed.
std::optional<protocol::Json> take_progress(const protocol::Json& from);

}  // namespace nsbox::kernel_messages
