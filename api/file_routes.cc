// Files: /mnt/files through the files API (…/files, files:ls, files:sign), and any path
// of the sandbox's own view with its user's rights (…/fs, fs:ls, fs:mkdir). Paths come
// in `?path=`: relative to /mnt/files or as /mnt/files/… for files; relative to
// /home/user or absolute for fs.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>

#include "api/api_service.h"
#include "isolation/sys/files.h"
#include "isolation/sys/rfc3339.h"
#include "isolation/sys/syscall.h"
#include "runtime/protocol/frame.h"

namespace nsbox::api {
namespace {

constexpr size_t kDefaultPage = 1000;
constexpr size_t kMaxPage = 100000;

// "report.csv" and "/mnt/files/report.csv" alike.
Result<std::string> files_path(const HttpRequest& r, bool required) {
  auto it = r.query.find("path");
  if (it == r.query.end() || it->second.empty()) {
    if (required) return fail(make_error(ErrorCode::kMalformedRequest, "the path goes in ?path="));
    return std::string(".");
  }
  std::string p = it->second;
  std::string_view inside = FilesVolume::kInsidePath;
  if (p == inside) return std::string(".");
  if (p.starts_with(std::string(inside) + "/")) return p.substr(inside.size() + 1);
  if (p.starts_with("/"))
    return fail(make_error(ErrorCode::kInvalidArgument, "'" + p + "' is not in /mnt/files",
                           "give a path relative to /mnt/files, or use the fs endpoints for other places"));
  return p;
}

Result<std::pair<size_t, std::string>> page_params(const HttpRequest& r) {
  size_t limit = kDefaultPage;
  if (auto it = r.query.find("limit"); it != r.query.end()) {
    char* end = nullptr;
    unsigned long v = std::strtoul(it->second.c_str(), &end, 10);
    if (it->second.empty() || *end || v == 0 || v > kMaxPage)
      return fail(make_error(ErrorCode::kInvalidArgument, "limit must be 1 to 100000"));
    limit = v;
  }
  std::string cursor;
  if (auto it = r.query.find("cursor"); it != r.query.end() && !it->second.empty()) {
    auto decoded = protocol::base64_decode(it->second);
    if (!decoded) return fail(make_error(ErrorCode::kMalformedRequest, "cursor is not one this server gave"));
    cursor = *decoded;
  }
  return std::pair{limit, cursor};
}

Json page_json(const files::DirPage& page, const std::string& shown_dir) {
  Json entries = Json::array();
  for (const auto& e : page.entries) {
    Json entry = {{"name", e.name}, {"type", e.type}, {"size", e.size}, {"allocated_bytes", e.allocated},
                  {"mode", e.mode}, {"mtime", e.mtime}};
    if (!protocol::is_valid_utf8(e.name)) entry["name_b64"] = protocol::base64_encode(e.name);
    entries.push_back(std::move(entry));
  }
  return {{"path", shown_dir}, {"entries", entries},
          {"next_cursor", page.next_cursor.empty() ? Json(nullptr) : Json(protocol::base64_encode(page.next_cursor))}};
}

bool flag(const HttpRequest& r, const char* name) { return r.query_value(name) == "true"; }

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}


Error too_large_download(const std::string& path, const struct stat& st) {
  return make_error(ErrorCode::kLimitExceeded,
                    path + " is " + format_bytes(static_cast<uint64_t>(st.st_size)) + " (" +
                        format_bytes(static_cast<uint64_t>(st.st_blocks) * 512) + " on disk), more than the download limit of 10 GiB");
}

// What every fs route starts with: its ?path= (required), the sandbox's view as ?run_as=
// (one of its accounts; user by default; 404 for none), 409 when it is not running, and
// the path as the sandbox shows it (422 for `..`, /proc, ...).
struct FsTarget {
  std::string path;   // as asked
  std::string shown;  // normalized: absolute in the sandbox
  SandboxFs fs;
};

Result<FsTarget> fs_target(const Runtime& runtime, const HttpRequest& r, const std::string& sandbox) {
  auto path = r.query.find("path");
  if (path == r.query.end() || path->second.empty())
    return fail(make_error(ErrorCode::kMalformedRequest, "the path goes in ?path="));
  auto run_as = r.query.find("run_as");
  auto fs = NSBOX_TRY(runtime.sandbox_fs(sandbox, run_as == r.query.end() ? "" : run_as->second));
  auto shown = NSBOX_TRY(fs.path_of(path->second));
  return FsTarget{path->second, std::move(shown), std::move(fs)};
}

}  // namespace

void ApiService::put_file(Exchange& x, const Call& c) {
  const std::string& sandbox = c.sandbox;
  auto rel = files_path(x.request(), true);
  if (!rel) return respond_error(x, rel.error());
  auto volume = runtime_.files(sandbox);
  if (!volume) return respond_error(x, volume.error());
  auto up = volume->upload(x.body_fd(), *rel, config_.max_upload_bytes, 0644, [&] { return x.body_complete(); });
  if (!up) return respond_error(x, up.error());
  x.respond(200, {{"sandbox_mount_prefix", FilesVolume::kInsidePath}, {"mount_relative_path", up->relative},
                  {"path", FilesVolume::inside_path(up->relative)}, {"size", up->size}, {"sha256", up->sha256}});
}

// A signed link: its signature, not a token, says who may read what, and until when.
Result<void> ApiService::check_link(const HttpRequest& r, const std::string& sandbox) const {
  char* end = nullptr;
  std::string expires_text = r.query_value("expires");
  int64_t expires = std::strtoll(expires_text.c_str(), &end, 10);
  if (expires_text.empty() || *end || !signer_.verify(sandbox, r.query_value("path"), expires, r.query_value("signature"), unix_now()))
    return fail(make_error(ErrorCode::kPermissionDenied, "this download link has expired or was altered",
                           "ask for a new one (POST .../files:sign)"));
  return {};
}

void ApiService::get_file(Exchange& x, const Call& c) {
  const std::string& sandbox = c.sandbox;
  const HttpRequest& r = x.request();
  auto rel = files_path(r, true);
  if (!rel) return respond_error(x, rel.error());
  std::string id = sandbox;
  if (r.query.count("signature"))
    if (auto signed_ok = check_link(r, sandbox); !signed_ok) return respond_error(x, signed_ok.error());
  auto volume = runtime_.files(id);
  if (!volume) return respond_error(x, volume.error());
  struct stat st{};
  auto fd = volume->open_file(*rel, &st);
  if (!fd) return respond_error(x, fd.error());
  if (static_cast<uint64_t>(st.st_size) > kMaxDownloadBytes) return respond_error(x, too_large_download(*rel, st));
  x.respond_file(std::move(*fd), static_cast<uint64_t>(st.st_size));
}

void ApiService::delete_file(Exchange& x, const Call& c) {
  const std::string& sandbox = c.sandbox;
  auto rel = files_path(x.request(), true);
  if (!rel) return respond_error(x, rel.error());
  auto volume = runtime_.files(sandbox);
  if (!volume) return respond_error(x, volume.error());
  if (auto r = volume->remove(*rel, flag(x.request(), "recursive")); !r) return respond_error(x, r.error());
  x.respond(200, {{"removed", Json::array({FilesVolume::inside_path(*FilesVolume::normalize(*rel))})}});
}

void ApiService::list_files(Exchange& x, const Call& c) {
  const std::string& sandbox = c.sandbox;
  auto rel = files_path(x.request(), false);
  if (!rel) return respond_error(x, rel.error());
  auto params = page_params(x.request());
  if (!params) return respond_error(x, params.error());
  auto volume = runtime_.files(sandbox);
  if (!volume) return respond_error(x, volume.error());
  auto page = volume->list(*rel, params->first, params->second);
  if (!page) return respond_error(x, page.error());
  auto norm = FilesVolume::normalize(*rel);
  x.respond(200, page_json(*page, norm && !norm->empty() ? FilesVolume::inside_path(*norm) : FilesVolume::kInsidePath));
}

void ApiService::sign_file(Exchange& x, const Call& c) {
  const std::string& sandbox = c.sandbox;
  const HttpRequest& r = x.request();
  auto rel = files_path(r, true);
  if (!rel) return respond_error(x, rel.error());
  auto body = body_object(r);
  if (!body) return respond_error(x, body.error());
  if (auto ok = only_fields(*body, {"expires_in_s"}); !ok) return respond_error(x, ok.error());
  int64_t seconds = 3600;
  if (auto e = body->find("expires_in_s"); e != body->end()) {
    if (!e->is_number_integer() || e->get<int64_t>() <= 0 || e->get<int64_t>() > kMaxLinkSeconds)
      return respond_error(x, make_error(ErrorCode::kInvalidArgument, "\"expires_in_s\" must be whole seconds, 1 to 604800 (a week)"));
    seconds = e->get<int64_t>();
  }
  // The link names the sandbox by id (a name may be given to another sandbox later) and
  // the file as asked; the file must exist now.
  auto info = runtime_.inspect(sandbox);
  if (!info) return respond_error(x, info.error());
  auto volume = runtime_.files(info->record.id);
  if (!volume) return respond_error(x, volume.error());
  struct stat st{};
  if (auto fd = volume->open_file(*rel, &st); !fd) return respond_error(x, fd.error());
  std::string path = r.query_value("path");
  int64_t expires = unix_now() + seconds;
  std::string link = signer_.link(info->record.id, path, expires);
  x.respond(200, {{"download_url", config_.public_url + link}, {"download_path", link}, {"expires_at", sys::rfc3339(expires)}});
}

void ApiService::fs_get(Exchange& x, const Call& c) {
  auto t = fs_target(runtime_, x.request(), c.sandbox);
  if (!t) return respond_error(x, t.error());
  struct stat st{};
  auto fd = t->fs.open_read(t->path, &st);
  if (!fd) return respond_error(x, fd.error());
  if (static_cast<uint64_t>(st.st_size) > kMaxDownloadBytes) return respond_error(x, too_large_download(t->shown, st));
  x.respond_file(std::move(*fd), static_cast<uint64_t>(st.st_size));
}

void ApiService::fs_put(Exchange& x, const Call& c) {
  auto t = fs_target(runtime_, x.request(), c.sandbox);
  if (!t) return respond_error(x, t.error());
  const HttpRequest& r = x.request();
  mode_t mode = 0644;
  if (auto m = r.query.find("mode"); m != r.query.end()) {
    char* end = nullptr;
    unsigned long v = std::strtoul(m->second.c_str(), &end, 8);
    if (m->second.empty() || *end || v > 07777) return respond_error(x, make_error(ErrorCode::kInvalidArgument, "mode must be octal, e.g. 0644"));
    mode = static_cast<mode_t>(v);
  }
  auto written = t->fs.write(t->path, x.body_fd(), config_.max_upload_bytes, mode, [&] { return x.body_complete(); });
  if (!written) return respond_error(x, written.error());
  x.respond(200, {{"path", t->shown}, {"size", *written}});
}

void ApiService::fs_delete(Exchange& x, const Call& c) {
  auto t = fs_target(runtime_, x.request(), c.sandbox);
  if (!t) return respond_error(x, t.error());
  if (auto removed = t->fs.remove(t->path, flag(x.request(), "recursive")); !removed) return respond_error(x, removed.error());
  x.respond(200, {{"removed", Json::array({t->shown})}});
}

void ApiService::fs_list(Exchange& x, const Call& c) {
  auto t = fs_target(runtime_, x.request(), c.sandbox);
  if (!t) return respond_error(x, t.error());
  auto params = page_params(x.request());
  if (!params) return respond_error(x, params.error());
  auto page = t->fs.list(t->path, params->first, params->second);
  if (!page) return respond_error(x, page.error());
  x.respond(200, page_json(*page, t->shown));
}

void ApiService::fs_mkdir(Exchange& x, const Call& c) {
  auto t = fs_target(runtime_, x.request(), c.sandbox);
  if (!t) return respond_error(x, t.error());
  if (auto made = t->fs.make_dir(t->path, flag(x.request(), "parents")); !made) return respond_error(x, made.error());
  x.respond(201, {{"path", t->shown}});
}

void ApiService::fs_stat(Exchange& x, const Call& c) {
  auto t = fs_target(runtime_, x.request(), c.sandbox);
  if (!t) return respond_error(x, t.error());
  auto st = t->fs.stat(t->path);
  if (!st) return respond_error(x, st.error());
  std::string type = S_ISREG(st->st_mode) ? "file" : S_ISDIR(st->st_mode) ? "dir" : S_ISLNK(st->st_mode) ? "symlink" : "other";
  x.respond(200, {{"path", t->shown}, {"type", type}, {"size", st->st_size}, {"mode", st->st_mode & 07777}, {"mtime", st->st_mtime}});
}

Result<UniqueFd> ApiService::spool_body(Exchange& x) const {
  std::string spool_dir = runtime_.store().root().cache_dir();
  UniqueFd spool(::open(spool_dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600));
  if (!spool) return fail(sys_error("hold the archive in " + spool_dir));
  std::vector<char> buf(1 << 20);
  uint64_t total = 0;
  for (;;) {
    ssize_t n = sys::retry_eintr([&] { return ::read(x.body_fd(), buf.data(), buf.size()); });
    if (n < 0) return fail(sys_error("read the archive"));
    if (n == 0) break;
    total += static_cast<uint64_t>(n);
    if (total > config_.max_upload_bytes)
      return fail(make_error(ErrorCode::kLimitExceeded, "the archive is larger than the server's upload limit of " +
                                                            std::to_string(config_.max_upload_bytes >> 20) + " MiB"));
    NSBOX_CHECK(files::write_all(spool.get(), std::string_view(buf.data(), static_cast<size_t>(n)), "the archive"));
  }
  NSBOX_CHECK(x.body_complete());
  if (::lseek(spool.get(), 0, SEEK_SET) != 0) return fail(sys_error("rewind the archive"));
  return spool;
}

// A tar or zip archive unpacked into a directory of the sandbox (the Agents SDK's
// `extract`): spooled to an unnamed file of the server's (the check reads it twice), then
// Runtime::extract.
void ApiService::fs_extract(Exchange& x, const Call& c) {
  auto t = fs_target(runtime_, x.request(), c.sandbox);
  if (!t) return respond_error(x, t.error());
  const std::string& sandbox = c.sandbox;
  const std::string& dir = t->path;
  const HttpRequest& r = x.request();
  std::string format = r.query_value("format");
  if (format.empty()) format = "tar";
  if (format != "tar" && format != "zip")
    return respond_error(x, make_error(ErrorCode::kInvalidArgument, "format must be tar or zip, not '" + format + "'"));
  uint64_t limit[2] = {100000, 4ull << 30};
  const char* names[2] = {"max_members", "max_bytes"};
  for (int i = 0; i < 2; ++i) {
    std::string v = r.query_value(names[i]);
    if (v.empty()) continue;
    char* end = nullptr;
    unsigned long long n = std::strtoull(v.c_str(), &end, 10);
    if (*end || n == 0) return respond_error(x, make_error(ErrorCode::kInvalidArgument, std::string(names[i]) + " must be a positive number"));
    limit[i] = n;
  }
  auto spool = spool_body(x);
  if (!spool) return respond_error(x, spool.error());
  auto done = runtime_.extract(sandbox, dir, spool->get(), format == "zip", limit[0], limit[1], false, r.query_value("run_as"));
  if (!done) return respond_error(x, done.error());
  x.respond(200, *done);
}

}  // namespace nsbox::api
