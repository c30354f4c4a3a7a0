// Processes: their output (kept per stream, read from offsets) and their input.
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>

#include "runtime/supervisor/processes.h"

namespace nsbox {
namespace {

using protocol::Json;

Error invalid(const std::string& message) { return make_error(ErrorCode::kInvalidArgument, message); }

Result<uint64_t> number_of(const Json& request, const char* key, uint64_t fallback, uint64_t max) {
  auto it = request.find(key);
  if (it == request.end() || it->is_null()) return fallback;
  if (!it->is_number_unsigned() || it->get<uint64_t>() > max)
    return fail(invalid(std::string(key) + " must be a number from 0 to " + std::to_string(max)));
  return it->get<uint64_t>();
}

Json chunk_json(const StreamLog::Chunk& c) {
  Json j = {{"offset", c.offset}};
  protocol::put_bytes(j, c.bytes);
  if (c.skipped) j["skipped"] = c.skipped;
  return j;
}

}  // namespace

void Processes::on_readable(uint64_t command, bool is_stdout) {
  auto it = processes_.find(command);
  if (it == processes_.end()) return;
  Process& p = it->second;
  std::string chunk;
  UniqueFd& fd = p.tty ? p.master : is_stdout ? p.out_r : p.err_r;
  // A few chunks per wakeup: a flooding process cannot keep the loop from its other fds.
  for (int i = 0; i < 4 && host_.loop().read_chunk(fd, chunk); ++i) (is_stdout ? p.out : p.err)->append(chunk);
  answer_waiters(p, false);
  if (p.session) answer_windows(p, false);
}

// Everything the pipes hold now (bounded by `rounds` chunks of 64 KiB per stream).
void Processes::take_output(Process& p, int rounds) {
  std::string chunk;
  for (int i = 0; i < rounds && host_.loop().read_chunk(p.tty ? p.master : p.out_r, chunk); ++i) p.out->append(chunk);
  for (int i = 0; !p.tty && i < rounds && host_.loop().read_chunk(p.err_r, chunk); ++i) p.err->append(chunk);
}

bool Processes::has_news(const Process& p, uint64_t offset, uint64_t stderr_offset) const {
  return p.exit_code || offset < p.out->end() || (!p.tty && stderr_offset < p.err->end());
}

void Processes::read(int client_fd, const Json& request) {
  auto found = find(request);
  if (!found) return error(client_fd, found.error());
  Process& p = **found;
  auto offset = number_of(request, "offset", 0, UINT64_MAX);
  auto stderr_offset = number_of(request, "stderr_offset", 0, UINT64_MAX);
  auto wait = number_of(request, "wait_ms", 0, kMaxWaitMs);
  auto max = number_of(request, "max_bytes", kMaxReadBytes, kMaxReadBytes);
  for (const auto* r : {&offset, &stderr_offset, &wait, &max})
    if (!*r) return error(client_fd, r->error());
  if (*wait == 0 || p.waiters.size() >= kMaxWaiters || has_news(p, *offset, *stderr_offset))
    return answer(p, client_fd, *offset, *stderr_offset, *max);
  uint64_t id = p.command;
  auto timer = host_.loop().add_timer(*wait, [this, id, client_fd] {
    auto it = processes_.find(id);
    if (it == processes_.end()) return;
    auto& waiters = it->second.waiters;
    auto w = std::find_if(waiters.begin(), waiters.end(), [&](const Waiter& one) { return one.client_fd == client_fd; });
    if (w == waiters.end()) return;
    Waiter mine = *w;
    waiters.erase(w);
    answer(it->second, mine.client_fd, mine.offset, mine.stderr_offset, mine.max);
  });
  if (!timer) return answer(p, client_fd, *offset, *stderr_offset, *max);
  p.waiters.push_back({client_fd, *timer, *offset, *stderr_offset, static_cast<size_t>(*max)});
}

void Processes::answer(Process& p, int client_fd, uint64_t offset, uint64_t stderr_offset, size_t max) {
  Json reply = status(p);
  reply["ok"] = true;
  reply["stdout"] = chunk_json(p.out->read(offset, max));
  if (!p.tty) reply["stderr"] = chunk_json(p.err->read(stderr_offset, max));
  host_.send_to_client(client_fd, reply);
}

// Waiters with something new to read are answered (all of them once the process ended).
void Processes::answer_waiters(Process& p, bool all) {
  auto& waiters = p.waiters;
  for (size_t i = 0; i < waiters.size();) {
    Waiter w = waiters[i];
    if (!all && !has_news(p, w.offset, w.stderr_offset)) {
      ++i;
      continue;
    }
    waiters.erase(waiters.begin() + static_cast<long>(i));
    host_.loop().cancel_timer(w.timer);
    answer(p, w.client_fd, w.offset, w.stderr_offset, w.max);
  }
}

void Processes::write(int client_fd, const Json& request) {
  auto found = find(request);
  if (!found) return error(client_fd, found.error());
  Process& p = **found;
  std::string data;
  if (auto it = request.find("data_b64"); it != request.end() && it->is_string()) {
    auto decoded = protocol::base64_decode(it->get<std::string>());
    if (!decoded) return error(client_fd, invalid("\"data_b64\" is not base64"));
    data = std::move(*decoded);
  } else if (auto t = request.find("data"); t != request.end() && t->is_string()) {
    data = t->get<std::string>();
  }
  bool eof = request.value("eof", false);
  if (p.exit_code || (!p.master && !p.stdin_w))
    return error(client_fd, invalid("process " + std::to_string(p.pid) + (p.exit_code ? " has exited" : " has no input open")));
  if (p.input.size() + data.size() > kMaxPendingInput)
    return error(client_fd, make_error(ErrorCode::kLimitExceeded, "process " + std::to_string(p.pid) + " has " + std::to_string(p.input.size()) +
                                                                      " bytes of input it has not read",
                                       "at most 1 MiB waits; wait for it to read its input"));
  p.input += data;
  if (eof && !p.tty) p.close_stdin = true;
  if (auto fed = feed(p); !fed) return error(client_fd, fed.error());
  host_.send_to_client(client_fd, {{"ok", true}, {"pid", p.pid}, {"accepted", data.size()}});
}

// The process takes what it can now; the rest waits for it (EPOLLOUT), never the supervisor.
Result<void> Processes::feed(Process& p) {
  UniqueFd& fd = p.tty ? p.master : p.stdin_w;
  while (!p.input.empty() && fd) {
    ssize_t n = ::write(fd.get(), p.input.data(), p.input.size());
    if (n > 0) {
      p.input.erase(0, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) break;
    p.input.clear();  // EPIPE: it closed its input; what was typed is lost, as in a shell
    if (!p.tty) {
      host_.loop().remove(fd.get());
      fd.reset();
    }
    return fail(sys_error("write to the input of process " + std::to_string(p.pid)));
  }
  if (p.tty) {
    if (fd) (void)host_.loop().modify(fd.get(), p.input.empty() ? EPOLLIN : EPOLLIN | EPOLLOUT);
    return {};
  }
  if (!fd) return {};
  uint64_t id = p.command;
  host_.loop().remove(fd.get());
  if (!p.input.empty()) {
    (void)host_.loop().add(fd.get(), EPOLLOUT, [this, id](uint32_t) {
      auto it = processes_.find(id);
      if (it != processes_.end()) (void)feed(it->second);
    });
  } else if (p.close_stdin) {
    fd.reset();
  }
  return {};
}

}  // namespace nsbox
