// Port forwards (docs/api.md, "Ports"; runtime/supervisor/port_forwards.h):
// POST .../ports {port, host?, host_port?} -> {port, host, host_port}: the sandbox's
// 127.0.0.1:port reachable at host:host_port of the server's machine, without a token;
// GET .../ports -> {ports: [...]}; DELETE .../ports/{port} -> {closed: port}.
#include <cstdlib>

#include "api/api_service.h"
#include "api/http_errors.h"
#include "runtime/core/port_number.h"

namespace nsbox::api {
namespace {

Result<uint16_t> port_value(const Json& body, const char* key, unsigned least, std::optional<uint16_t> fallback) {
  return port_field(body, key, least, fallback, ErrorCode::kMalformedRequest);
}

}  // namespace

void ApiService::port_open(Exchange& x, const Call& c) {
  auto body = body_object(x.request());
  if (!body) return respond_error(x, body.error());
  if (auto ok = only_fields(*body, {"port", "host", "host_port"}); !ok) return respond_error(x, ok.error());
  auto port = port_value(*body, "port", 1, std::nullopt);
  if (!port) return respond_error(x, port.error());
  auto host_port = port_value(*body, "host_port", 0, 0);
  if (!host_port) return respond_error(x, host_port.error());
  auto host = body->value("host", Json(""));
  if (!host.is_string()) return respond_error(x, make_error(ErrorCode::kMalformedRequest, "\"host\" must be a string"));
  auto forward = runtime_.expose_port(c.sandbox, *port, host.get<std::string>(), *host_port);
  if (!forward) return respond_error(x, forward.error());
  x.respond(200, forward->to_json());
}

void ApiService::port_list(Exchange& x, const Call& c) {
  auto info = runtime_.inspect(c.sandbox);
  if (!info) return respond_error(x, info.error());
  Json ports = Json::array();
  for (const auto& f : info->record.facts.ports) ports.push_back(f.to_json());
  x.respond(200, {{"ports", ports}});
}

void ApiService::port_close(Exchange& x, const Call& c) {
  std::string text(c.arg);
  char* end = nullptr;
  long port = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || port < 1 || port > 65535)
    return respond_error(x, make_error(ErrorCode::kNotFound, "no port forward '" + text.substr(0, 16) + "': a port is from 1 to 65535"));
  auto closed = runtime_.close_port(c.sandbox, static_cast<uint16_t>(port));
  if (!closed) return respond_error(x, closed.error());
  if (!*closed) return respond_error(x, make_error(ErrorCode::kNotFound, "port " + text + " is not forwarded"));
  x.respond(200, {{"closed", port}});
}

}  // namespace nsbox::api
