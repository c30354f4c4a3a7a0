// How the CLI speaks: readable text for people, one JSON document with --json.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "isolation/sys/error.h"

namespace nsbox::cli {

struct Output {
  explicit Output(bool json_output = false, int own_failure_exit = 0) : json(json_output), failure_exit(own_failure_exit) {}
  bool json = false;
  // Non-zero: the exit status of nsbox's own failures (125 for commands whose status is
  // their program's: sh, run, exec).
  int failure_exit = 0;

  void document(const nlohmann::json& j) const;   // --json: the one JSON document on stdout
  void line(const std::string& text) const;       // human mode: a line on stdout
  void note(const std::string& text) const;       // stderr, both modes (warnings, progress)
  // Prints the error (JSON error object on stderr with --json) and returns the exit code.
  int error(const Error& e) const;
};

// Bytes that came from a sandbox (file names), made safe for a terminal: control
// characters (C0, DEL, C1), backslashes and bytes that are not UTF-8 become \xNN, so a
// name cannot forge a line, move the cursor or recolour the screen. Without
// `escape_backslash` (messages), a backslash stays as it is.
std::string printable(std::string_view bytes, bool escape_backslash = true);

// A sandbox's output on its way to the operator's terminal (sh, run, exec, pty read):
// control sequences (OSC 52's clipboard writes, title changes, screen clears, a bare CR
// that hides a line) are shown escaped, \x1b..., newlines and tabs kept, so a program in
// the sandbox cannot act on the terminal. A UTF-8 character split between two writes is
// held until it is whole. Only when `fd` is a terminal and `raw` (--raw) is not asked for;
// otherwise the bytes go as they came (a pipe or a file gets them exact).
class TerminalText {
 public:
  TerminalText(int fd, bool raw);
  ~TerminalText();  // flushes
  TerminalText(const TerminalText&) = delete;
  TerminalText& operator=(const TerminalText&) = delete;

  void write(std::string_view bytes);
  void flush();  // a held partial character is written escaped

 private:
  int fd_;
  bool filter_;
  std::string held_;
};

// Writes a command's or cell's output to our stdout or stderr. When the reader has gone
// (EPIPE: SIGPIPE is ignored, as a caller that ignores it passes on to what it starts),
// nsbox ends at once as SIGPIPE would have ended it (exit 141): its connection closes,
// and the supervisor kills the command (a cell is interrupted), rather than relaying on
// into a closed pipe for ever.
void write_output(int fd, std::string_view bytes);

constexpr int kExitError = 1;
constexpr int kExitOwnFailure = 125;
constexpr int kExitUsage = 2;

}  // namespace nsbox::cli
