// Where a sandbox's Python packages come from (docs/network.md, "Packages"): a package
// index reached through the egress proxy, a wheelhouse bound read-only (fully offline),
// which distributions may be installed on import, and whether cells do that.
//
//   --pip-index URL --wheelhouse DIR --packages-allow DIST[,DIST...] --auto-install on|off
//   API: "packages": {"pip_index", "wheelhouse", "allow": [...], "auto_install": true}
//
// Every sandbox has a user site on /home/user (PYTHONUSERBASE), so `pip install` works
// with or without a source configured here (it then needs the network to have one).
#pragma once

#include <string>
#include <vector>

#include "isolation/sys/error.h"
#include "runtime/core/net_policy.h"
#include "runtime/protocol/frame.h"

namespace nsbox {

struct PackageSources {
  static constexpr const char* kWheelhouseInside = "/opt/wheelhouse";

  std::string pip_index;   // an http(s) URL (a PEP 503 simple index)
  std::string wheelhouse;  // a host directory of wheels, absolute
  std::vector<std::string> allow;  // distributions auto-install may install; empty: any
  bool auto_install = true;

  bool any_source() const { return !pip_index.empty() || !wheelhouse.empty(); }
  protocol::Json to_json() const;
  static Result<PackageSources> from_json(const protocol::Json& j);
  // The variables every process of the sandbox gets: the user site, pip's sources and
  // settings, and what the kernel's auto-install reads.
  EnvList environment() const;
  // The sandbox's network policy from the create document's "net" (a string or an
  // {"allow", "allow_private"} object): the index's host joins the allowlist (a sandbox
  // without network gets the proxy with exactly that host allowed) before the private
  // names are checked against it, so the index may be one of them. A wheelhouse needs
  // no network.
  Result<net::NetPolicy> network_policy(const protocol::Json& net) const;
};

}  // namespace nsbox
