// Every error the API answers: one table from nsbox's stable error codes to HTTP statuses
// (docs/api.md, "Errors"), and the JSON body {"error": {"code", "message", "hint"}}.
#pragma once

#include <nlohmann/json.hpp>

#include "isolation/sys/error.h"

namespace nsbox::api {

int http_status(ErrorCode code);
nlohmann::json error_document(const Error& e);

}  // namespace nsbox::api
