// Ports of a sandbox reachable from the host (docs/semantics.md, "Ports"): for each port
// P forwarded, a listener on the host's loopback (127.0.0.1 and a free port unless asked
// otherwise, like `docker -p 127.0.0.1::P`); each connection accepted there is joined to
// one made from a socket of the sandbox's network namespace to its 127.0.0.1:P. The
// sandbox sees a client of its own loopback; nothing of the host becomes reachable from
// inside, and a sandbox with `--net none` is reached the same way. No token: any local
// process of the host can connect to a forward (docs/network.md, "Into a sandbox").
//
//   port_open  {port, host?, host_port?} -> {forward: {port, host, host_port}}
//              (asked again for the same port: the same forward)
//   port_list  {}                        -> {forwards: [...]}
//   port_close {port}                    -> {closed: true|false}
//
// Bounded: kMaxForwards ports, kMaxConnections connections at once (one more is closed
// at its accept), kBufferBytes in each direction of each: at most 16 MiB of host memory,
// whatever the sandbox or a host client sends or stops reading. A connection whose far
// side does not answer its connect within kConnectTimeoutMs is closed.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "isolation/sys/error.h"
#include "isolation/sys/unique_fd.h"
#include "runtime/core/sandbox_record.h"
#include "runtime/supervisor/event_loop.h"

namespace nsbox {

class PortForwards {
 public:
  static constexpr size_t kMaxForwards = 16;
  static constexpr size_t kMaxConnections = 128;
  static constexpr size_t kBufferBytes = 64 << 10;
  static constexpr uint64_t kConnectTimeoutMs = 10000;

  // `sandbox_ns`: the sandbox's user and network namespaces, open (sockets are made in
  // them); empty for a sandbox on the host's network (`--net host`).
  PortForwards(EventLoop& loop, std::vector<UniqueFd> sandbox_ns) : loop_(loop), sandbox_ns_(std::move(sandbox_ns)) {}
  ~PortForwards();
  PortForwards(const PortForwards&) = delete;
  PortForwards& operator=(const PortForwards&) = delete;

  // The forward of `port`, made now or already there. `host` "" is 127.0.0.1; it must be
  // a loopback address. `host_port` 0: any free port.
  Result<ExposedPort> open(uint16_t port, const std::string& host, uint16_t host_port);
  bool close(uint16_t port);  // false: it was not forwarded
  std::vector<ExposedPort> list() const;

 private:
  struct Listener {
    ExposedPort forward;
    UniqueFd fd;
  };
  // One forwarded connection: bytes read from one side wait in the other's buffer.
  struct Connection {
    UniqueFd outside, inside;
    bool connected = false;
    int connect_timer = -1;
    std::string to_inside, to_outside;
    bool outside_ended = false, inside_ended = false;  // EOF read from that side
    bool inside_shut = false, outside_shut = false;    // EOF passed on to that side
  };

  void accept_on(uint16_t port);
  Result<void> connect_inside(UniqueFd outside, uint16_t port);
  void on_event(uint64_t id, bool inside, uint32_t events);
  bool transfer(Connection& c);  // false: the connection failed
  void drop(uint64_t id);

  EventLoop& loop_;
  std::vector<UniqueFd> sandbox_ns_;
  std::map<uint16_t, Listener> listeners_;
  std::map<uint64_t, Connection> connections_;
  uint64_t next_id_ = 1;
};

}  // namespace nsbox
