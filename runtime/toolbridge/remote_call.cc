#include "runtime/toolbridge/remote_call.h"

#include <sys/random.h>

#include <chrono>
#include <thread>

namespace nsbox::tools {
namespace {

using protocol::Json;
using Clock = std::chrono::steady_clock;

constexpr size_t kMessageChars = 300;

// Retry-After in seconds (the HTTP-date form is not used by these services): else
// 1 s, 2 s, ... doubled per try, plus up to half of it again at random.
std::chrono::milliseconds backoff(const http::Response& r, int attempt) {
  const std::string after = r.header("retry-after");
  if (!after.empty() && after.find_first_not_of("0123456789") == std::string::npos && after.size() < 6)
    return std::chrono::seconds(std::min(std::stoi(after), kMaxRetryAfterS));
  unsigned random = 0;
  (void)::getrandom(&random, sizeof random, 0);
  int base_ms = 1000 << attempt;
  return std::chrono::milliseconds(base_ms + static_cast<int>(random % static_cast<unsigned>(base_ms / 2 + 1)));
}

}  // namespace

Result<RemoteReply> call_remote(http::Client& http, const std::string& method, const std::string& url,
                                const http::Headers& headers, const Json& body, double timeout_s) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  const std::string payload = body.is_null() ? std::string() : body.dump(-1, ' ', false, Json::error_handler_t::replace);
  http::Request request;
  request.method = method;
  request.url = url;
  request.headers = headers;
  request.headers.emplace_back("accept", "application/json");
  if (!body.is_null()) {
    request.headers.emplace_back("content-type", "application/json");
    request.body = payload;
  }
  for (int attempt = 0;; ++attempt) {
    http::Response response = NSBOX_TRY(http.perform(request));
    if (response.status == 429 && attempt + 1 < kRateLimitTries) {
      auto wait = backoff(response, attempt);
      if (Clock::now() + wait < deadline) {
        std::this_thread::sleep_for(wait);
        continue;
      }
    }
    RemoteReply reply;
    reply.status = response.status;
    std::string past = protocol::past_limits(protocol::measure_json(response.body), protocol::kAnswerJson, "the remote's answer");
    if (!past.empty()) {  // not parsed: its text says why, as a body that is not JSON would
      reply.body = Json(Json::value_t::discarded);
      reply.text = past;
      return reply;
    }
    reply.body = Json::parse(response.body, nullptr, false);
    reply.text = std::move(response.body);
    return reply;
  }
}

std::string remote_message(const RemoteReply& reply) {
  const Json& b = reply.body;
  std::string message;
  if (b.is_object()) {
    auto e = b.find("error");
    if (e != b.end() && e->is_string()) message = e->get<std::string>();
    else if (e != b.end() && e->is_object() && e->contains("message") && (*e)["message"].is_string())
      message = (*e)["message"].get<std::string>();
    else if (b.contains("message") && b["message"].is_string()) message = b["message"].get<std::string>();
  }
  if (message.empty()) message = reply.text;
  if (message.size() > kMessageChars) message = message.substr(0, kMessageChars) + "...";
  return message;
}

}  // namespace nsbox::tools
