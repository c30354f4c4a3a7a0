// Feeding a caller's stdin to a sandboxed command through a pipe of our own.
//
// The sandbox never receives the caller's fd itself: a file opened for reading can be
// reopened for writing through /proc/self/fd/0 (the check is on the inode, and rootless
// the user's files belong to the uid the sandbox runs as), and a terminal could be read
// for keystrokes. The pump copies bytes from the caller's fd into a pipe; the pipe's read
// end goes to the sandbox. Driven from the caller's poll loop: no thread (a thread would
// make clone() in a one-shot unsafe).
#pragma once

#include <poll.h>

#include <string>

#include "isolation/sys/error.h"
#include "isolation/sys/unique_fd.h"

namespace nsbox {

class StdinPump {
 public:
  static Result<StdinPump> open(int source_fd);

  int sandbox_end() const { return read_end_.get(); }
  void release_sandbox_end() { read_end_.reset(); }  // once passed on

  // Poll entries for the caller's loop (fd -1 when there is nothing to wait for).
  pollfd source_poll() const;
  pollfd sink_poll() const;
  // Moves what it can; call after poll with the two entries' revents.
  void pump(short source_revents, short sink_revents);
  void stop();  // the command has ended: close everything

 private:
  int source_ = -1;
  bool source_open_ = false;
  UniqueFd read_end_, write_end_;
  std::string buffer_;
};

}  // namespace nsbox
