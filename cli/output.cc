#include "cli/output.h"

#include <cstdio>
#include <iostream>

namespace nsbox::cli {

void Output::document(const nlohmann::json& j) const {
  std::cout << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n" << std::flush;
}

void Output::line(const std::string& text) const { std::cout << text << "\n" << std::flush; }

void Output::note(const std::string& text) const { std::cerr << "nsbox: " << text << "\n" << std::flush; }

int Output::error(const Error& e) const {
  if (json) {
    nlohmann::json err = {{"code", error_code_name(e.code)}, {"message", e.message}};
    if (!e.hint.empty()) err["hint"] = e.hint;
    std::cerr << nlohmann::json{{"error", err}}.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    std::cerr << "nsbox: error: " << e.message << "\n";
    if (!e.hint.empty()) std::cerr << "nsbox: hint: " << e.hint << "\n";
  }
  return e.code == ErrorCode::kInvalidArgument ? kExitUsage : kExitError;
}

}  // namespace nsbox::cli
