// An HTTP call to a tool or LLM service, with the retry rule of the hosted helpers: a 429
// is tried again (3 tries in all, after its Retry-After or an exponential backoff with
// jitter), nothing else is — a tool call is not idempotent, so a network error or a 5xx
// could have had its effect already. Bounded in time by the call's timeout.
#pragma once

#include <string>

#include "isolation/sys/error.h"
#include "mounts/http/client.h"
#include "runtime/protocol/frame.h"

namespace nsbox::tools {

constexpr int kRateLimitTries = 3;
constexpr int kMaxRetryAfterS = 30;

struct RemoteReply {
  long status = 0;
  protocol::Json body;  // discarded when not JSON
  std::string text;     // the body as sent (for messages, cut short)
};

// POST (or GET when `body` is null) `url` with `headers`; a JSON body sent as such.
Result<RemoteReply> call_remote(http::Client& http, const std::string& method, const std::string& url,
                                const http::Headers& headers, const protocol::Json& body, double timeout_s);

// What a failed reply says, for an error message: its JSON error's message, else the
// start of its text.
std::string remote_message(const RemoteReply& reply);

}  // namespace nsbox::tools
