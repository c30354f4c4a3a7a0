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

namespace {

// Whether `s`, the end of a write, is the beginning of a well-formed UTF-8 character whose
// rest may come in the next: some completion of it is well formed.
bool utf8_beginning(std::string_view s) {
  if (s.empty() || s.size() > 3) return false;
  for (char second : {'\x80', '\x90', '\xA0'}) {
    std::string whole(s);
    if (whole.size() == 1) whole += second;
    whole.resize(4, '\x80');
    if (protocol::utf8_sequence_length(whole) > s.size()) return true;
  }
  return false;
}

// `printable`, with `keep_lines`: newline and tab pass as they are. Returns how many
// bytes at the end were held back: an incomplete UTF-8 character, when `more` may follow.
size_t escape_into(std::string& out, std::string_view bytes, bool escape_backslash, bool keep_lines, bool more) {
  static const char kHex[] = "0123456789abcdef";
  auto escape = [&](unsigned char c) {
    out += "\\x";
    out += kHex[c >> 4];
    out += kHex[c & 15];
  };
  for (size_t i = 0; i < bytes.size();) {
    auto c = static_cast<unsigned char>(bytes[i]);
    if (keep_lines && (c == '\n' || c == '\t')) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
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
    if (n == 0 && more && utf8_beginning(bytes.substr(i))) return bytes.size() - i;
    bool c1 = n == 2 && c == 0xC2 && static_cast<unsigned char>(bytes[i + 1]) < 0xA0;  // U+0080..U+009F
    if (n == 0 || c1) {
      escape(c);
      ++i;
      continue;
    }
    out.append(bytes.substr(i, n));
    i += n;
  }
  return 0;
}

}  // namespace

TerminalText::TerminalText(int fd, bool raw) : fd_(fd), filter_(!raw && ::isatty(fd)) {}

TerminalText::~TerminalText() { flush(); }

void TerminalText::write(std::string_view bytes) {
  if (!filter_) return write_output(fd_, bytes);
  std::string in = std::move(held_);
  in.append(bytes);
  std::string out;
  size_t held = escape_into(out, in, false, true, true);
  held_ = in.substr(in.size() - held);
  if (!out.empty()) write_output(fd_, out);
}

void TerminalText::flush() {
  if (held_.empty()) return;
  std::string out;
  escape_into(out, held_, false, true, false);
  held_.clear();
  write_output(fd_, out);
}

std::string printable(std::string_view bytes, bool escape_backslash) {
  std::string out;
  escape_into(out, bytes, escape_backslash, false, false);
  return out;
}

}  // namespace nsbox::cli
