// The workspace root as one tar archive (docs/api.md, "Workspace archives"):
// GET .../workspace.tar streams it (a running, stopped or dead sandbox); PUT replaces the
// workspace of a running one with an archive.
#include <fcntl.h>
#include <unistd.h>

#include <thread>

#include "api/api_service.h"
#include "isolation/sys/syscall.h"

namespace nsbox::api {

// nsbox-archive packs into a pipe on a thread of this request's own; this worker relays
// what comes out of it. Nothing is sent until the first bytes: a workspace that cannot be
// packed at all is an error answer. Past them, a failure cuts the stream (the client sees
// an incomplete chunked answer, never a short archive that looks whole). A client that
// stops reading stops the packing: the pipe fills, then its end is closed.
void ApiService::workspace_get(Exchange& x, const Call& c) {
  int ends[2];
  if (::pipe2(ends, O_CLOEXEC) != 0) return respond_error(x, sys_error("pipe2 for the workspace archive"));
  UniqueFd read_end(ends[0]), write_end(ends[1]);
  Result<Json> packed = Json();
  std::thread packer([&, out = std::move(write_end)]() mutable {
    packed = runtime_.workspace_archive(c.sandbox, out.get());
    out.reset();  // with the archiver's copy gone, the relay reads its end
  });
  std::vector<char> buf(1 << 16);
  bool started = false, client_left = false;
  for (;;) {
    ssize_t n = sys::retry_eintr([&] { return ::read(read_end.get(), buf.data(), buf.size()); });
    if (n <= 0) break;
    if (!started) {
      x.relay_head(200, {{"Content-Type", "application/x-tar"}}, std::nullopt);
      started = true;
    }
    if (!x.relay_bytes(std::string_view(buf.data(), static_cast<size_t>(n)))) {
      client_left = true;
      break;
    }
  }
  read_end.reset();  // a packer still writing gets EPIPE and ends
  packer.join();
  if (started) return x.relay_end(packed.has_value() && !client_left);
  respond_error(x, packed ? make_error(ErrorCode::kInternal, "nsbox-archive wrote no archive") : packed.error());
}

void ApiService::workspace_put(Exchange& x, const Call& c) {
  auto spool = spool_body(x);
  if (!spool) return respond_error(x, spool.error());
  auto done = runtime_.replace_workspace(c.sandbox, spool->get());
  if (!done) return respond_error(x, done.error());
  x.respond(200, *done);
}

}  // namespace nsbox::api
