// Network modes (docs/network.md): `none` (a namespace of its own with only loopback, up),
// `allow` (the same namespace; the only way out is the host-side egress proxy, whose
// listening socket is made inside it: listen_inside), `internet` (the same namespace,
// with a tap device a user-mode NAT helper serves, and rules that refuse private ranges)
// and `host` (the host's network).
#pragma once

#include <span>
#include <string_view>

#include <sys/types.h>

#include <cstdint>

#include "isolation/sys/error.h"
#include "isolation/sys/unique_fd.h"

namespace nsbox::network {

enum class Mode { kNone, kHost, kAllow, kInternet };

Result<Mode> parse_mode(std::string_view name);
std::string_view mode_name(Mode mode);
int clone_flags(Mode mode);

// In the child, inside its new network namespace: brings `lo` up.
Result<void> setup_in_child(Mode mode);

// A TCP socket listening on 127.0.0.1:`port` inside the network namespace of
// `sandbox_pid`, for a host-side process to accept on: connections to it come from the
// sandbox, and what that process connects to is reached from the host's namespace. A
// short-lived child joins the sandbox's user and network namespaces to make it.
Result<UniqueFd> listen_inside(pid_t sandbox_pid, uint16_t port);

// A TCP socket (non-blocking, not connected) of the network namespace whose user and
// network namespaces `ns` are (open_namespaces(pid, {"user", "net"})): connected from the
// host side, it reaches the sandbox's 127.0.0.1 (a port forward's way in). Made by a
// child that shares our memory and descriptors: ~0.1 ms, no fork.
Result<UniqueFd> socket_inside(std::span<const int> ns);

}  // namespace nsbox::network
