// What reaches the operator's terminal from a sandbox (issue 33, finding 7): control
// sequences shown escaped, lines and tabs kept, characters split between writes whole.
#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <termios.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <string>

#include "cli/output.h"
#include "isolation/sys/unique_fd.h"

using nsbox::UniqueFd;
using nsbox::cli::TerminalText;

namespace {

// A terminal in raw mode (no \n -> \r\n on output): what a program writes to `slave` is
// read back exactly from `master`.
struct Terminal {
  UniqueFd master, slave;
  Terminal() {
    int m = -1, s = -1;
    REQUIRE(::openpty(&m, &s, nullptr, nullptr, nullptr) == 0);
    master.reset(m);
    slave.reset(s);
    termios t{};
    REQUIRE(::tcgetattr(s, &t) == 0);
    ::cfmakeraw(&t);
    REQUIRE(::tcsetattr(s, TCSANOW, &t) == 0);
  }
  std::string read_all() {
    std::string out;
    char buf[4096];
    for (pollfd p{master.get(), POLLIN, 0}; ::poll(&p, 1, 200) > 0;) {
      ssize_t n = ::read(master.get(), buf, sizeof buf);
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
    return out;
  }
};

}  // namespace

TEST_CASE("a sandbox's control sequences reach a terminal escaped, its lines, tabs and characters whole") {
  Terminal term;
  {
    TerminalText text(term.slave.get(), /*raw=*/false);
    text.write("clip\x1b]52;c;SGVsbG8=\x07 title\x1b]0;pwned\x07 clear\x1b[2J\x1b" "c");
    text.write("\tcol\nline\rover\n");
    text.write("euro \xe2\x82");  // a character split between two writes
    text.write("\xac, C1 \xc2\x9b" "31m, bad \xff, cut \xe2");
  }  // the destructor flushes the held \xe2 as a byte
  CHECK(term.read_all() ==
        "clip\\x1b]52;c;SGVsbG8=\\x07 title\\x1b]0;pwned\\x07 clear\\x1b[2J\\x1bc"
        "\tcol\nline\\x0dover\n"
        "euro \xe2\x82\xac, C1 \\xc2\\x9b31m, bad \\xff, cut \\xe2");
}

TEST_CASE("with --raw, or when stdout is not a terminal, a sandbox's bytes pass exactly") {
  const std::string bytes = "\x1b]52;c;SGVsbG8=\x07\r\xe2\x82\xac\xff";
  Terminal term;
  TerminalText(term.slave.get(), /*raw=*/true).write(bytes);
  CHECK(term.read_all() == bytes);

  int fds[2];
  REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
  UniqueFd r(fds[0]), w(fds[1]);
  TerminalText(w.get(), /*raw=*/false).write(bytes);
  w.reset();
  std::string got(64, '\0');
  got.resize(static_cast<size_t>(::read(r.get(), got.data(), got.size())));
  CHECK(got == bytes);
}
