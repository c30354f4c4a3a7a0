// Port forwards (docs/semantics.md, "Ports"):
//
//   nsbox port ID PORT [--listen HOST:PORT]   -> HOST:PORT on this host that reaches the
//                                                sandbox's 127.0.0.1:PORT
//   nsbox port ID PORT --close                -> stops forwarding it
//   nsbox port ID                             -> the forwards, one a line
#include <cstdlib>

#include "cli/context.h"
#include "runtime/core/port_number.h"

namespace nsbox::cli {
namespace {

Result<uint16_t> port_number(const std::string& text, const std::string& what, unsigned least) {
  if (auto port = parse_port(text, least)) return *port;
  return fail(make_error(ErrorCode::kInvalidArgument,
                         what + " must be a port number from " + std::to_string(least) + " to 65535, not '" + text + "'"));
}

// "127.0.0.1:0", "[::1]:8080", ":9000" (127.0.0.1) -> host and port.
Result<std::pair<std::string, uint16_t>> listen_address(const std::string& text) {
  auto colon = text.rfind(':');
  if (colon == std::string::npos)
    return fail(make_error(ErrorCode::kInvalidArgument, "--listen takes HOST:PORT, not '" + text + "'",
                           "e.g. --listen 127.0.0.1:8080 (port 0: a free one)"));
  std::string host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return std::pair{host, NSBOX_TRY(port_number(text.substr(colon + 1), "--listen's port", 0))};
}

std::string address_text(const ExposedPort& f) {
  std::string host = f.host.find(':') != std::string::npos ? "[" + f.host + "]" : f.host;
  return host + ":" + std::to_string(f.host_port);
}

int list_forwards(CommandContext& ctx, const std::string& sandbox) {
  auto info = ctx.runtime->inspect(sandbox);
  if (!info) return ctx.out.error(info.error());
  const auto& ports = info->record.facts.ports;
  if (ctx.out.json) {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& f : ports) list.push_back(f.to_json());
    ctx.out.document({{"ports", list}});
    return 0;
  }
  for (const auto& f : ports) ctx.out.line(std::to_string(f.port) + " -> " + address_text(f));
  return 0;
}

}  // namespace

int cmd_port(const Invocation& inv) {
  int code = 0;
  auto ctx = prepare(inv, code);
  if (!ctx) return code;
  const auto& pos = ctx->args.positionals;
  if (pos.empty() || pos.size() > 2)
    return ctx->out.error(make_error(ErrorCode::kInvalidArgument, "nsbox port takes a sandbox id or name, then a PORT"));
  if (pos.size() == 1) return list_forwards(*ctx, pos[0]);
  auto port = port_number(pos[1], "PORT", 1);
  if (!port) return ctx->out.error(port.error());
  if (ctx->args.has("close")) {
    auto closed = ctx->runtime->close_port(pos[0], *port);
    if (!closed) return ctx->out.error(closed.error());
    if (!*closed)
      return ctx->out.error(make_error(ErrorCode::kNotFound, "port " + pos[1] + " is not forwarded", "see `nsbox port " + pos[0] + "`"));
    if (ctx->out.json) ctx->out.document({{"closed", true}});
    return 0;
  }
  std::pair<std::string, uint16_t> at{"", 0};
  if (ctx->args.values.count("listen")) {
    auto parsed = listen_address(ctx->args.value("listen"));
    if (!parsed) return ctx->out.error(parsed.error());
    at = *parsed;
  }
  auto forward = ctx->runtime->expose_port(pos[0], *port, at.first, at.second);
  if (!forward) return ctx->out.error(forward.error());
  if (ctx->out.json) ctx->out.document(forward->to_json());
  else ctx->out.line(address_text(*forward));
  return 0;
}

}  // namespace nsbox::cli
