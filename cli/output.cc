#include "cli/output.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>

#include "isolation/sys/files.h"
#include "runtime/protocol/frame.h"

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
    // Messages may quote names made in a sandbox: no control bytes reach the terminal.
    std::cerr << "nsbox: error: " << printable(e.message, false) << "\n";
    if (!e.hint.empty()) std::cerr << "nsbox: hint: " << printable(e.hint, false) << "\n";
  }
  if (failure_exit) return failure_exit;
  return e.code == ErrorCode::kInvalidArgument || e.code == ErrorCode::kMalformedRequest ? kExitUsage : kExitError;
}

void write_output(int fd, std::string_view bytes) {
  auto written = files::write_all(fd, bytes, fd == STDOUT_FILENO ? "stdout" : "stderr");
  if (!written && written.error().sys_errno == EPIPE) ::_exit(128 + SIGPIPE);
}

std::string printable(std::string_view bytes, bool escape_backslash) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  auto escape = [&](unsigned char c) {
    out += "\\x";
    out += kHex[c >> 4];
    out += kHex[c & 15];
  };
  for (size_t i = 0; i < bytes.size();) {
    auto c = static_cast<unsigned char>(bytes[i]);
    if (c < 0x20 || c == 0x7f || (c == '\\' && escape_backslash)) {
      escape(c);
      ++i;
      continue;
    }
    if (c < 0x80) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    size_t n = protocol::utf8_sequence_length(bytes.substr(i));
    bool c1 = n == 2 && c == 0xC2 && static_cast<unsigned char>(bytes[i + 1]) < 0xA0;  // U+0080..U+009F
    if (n == 0 || c1) {
      escape(c);
      ++i;
      continue;
    }
    out.append(bytes.substr(i, n));
    i += n;
  }
  return out;
}

}  // namespace nsbox::cli
