// files (upload, ls, download, rm: the sandbox's /mnt/files from the host side) and volume.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <algorithm>

#include "cli/context.h"
#include "isolation/sys/files.h"
#include "mounts/volume_image.h"

namespace nsbox::cli {
namespace {

constexpr uint64_t kDefaultMaxUpload = 100ull << 20;
// A file's apparent size, which a sandbox sets at will (truncate -s 1T): downloads past
// it need --max-size. Holes stay holes in a downloaded file; to stdout they are zeros.
constexpr uint64_t kDefaultMaxDownload = 10ull << 30;

Result<uint64_t> max_size(const CommandContext& ctx, uint64_t fallback) {
  if (!ctx.args.values.count("max-size")) return fallback;
  return volume_image::parse_size(ctx.args.value("max-size"));
}

// A REMOTE argument: the path as given, or with --b64 the base64 of its bytes (the
// lossless `name_b64` that `ls --json` gives names that are not UTF-8).
Result<std::string> remote_path(const CommandContext& ctx, const std::string& arg) {
  if (!ctx.args.has("b64")) return arg;
  auto bytes = protocol::base64_decode(arg);
  if (!bytes) return fail(make_error(ErrorCode::kInvalidArgument, "'" + arg + "' is not base64 (--b64)"));
  return *bytes;
}

std::string base_name(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  auto slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

nlohmann::json uploaded_json(const FilesVolume::Uploaded& u) {
  return {{"sandbox_mount_prefix", FilesVolume::kInsidePath}, {"mount_relative_path", u.relative}, {"size", u.size}, {"sha256", u.sha256}};
}

Result<FilesVolume::Uploaded> upload_one(FilesVolume& volume, const std::string& local, const std::string& remote, uint64_t max) {
  if (local == "-") return volume.upload(STDIN_FILENO, remote, max, 0644);
  UniqueFd fd(::open(local.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return fail(sys_error("open " + local));
  struct stat st{};
  ::fstat(fd.get(), &st);
  if (static_cast<uint64_t>(st.st_size) > max)
    return fail(make_error(ErrorCode::kLimitExceeded, local + " is " + std::to_string(st.st_size >> 20) + " MiB, more than the upload limit of " +
                                                          std::to_string(max >> 20) + " MiB",
                           "raise it with --max-size"));
  return volume.upload(fd.get(), remote, max, st.st_mode);
}

// A local directory, recursively: directories made, regular files uploaded, anything
// else (symlinks, devices) skipped and reported.
Result<void> upload_tree(FilesVolume& volume, const std::string& local, const std::string& remote, uint64_t max,
                         nlohmann::json& uploaded, nlohmann::json& skipped) {
  NSBOX_CHECK(volume.make_dirs(remote));
  auto names = NSBOX_TRY(files::list_dir(local));
  std::sort(names.begin(), names.end());
  for (const auto& n : names) {
    std::string l = local + "/" + n, r = remote + "/" + n;
    struct stat st{};
    if (::lstat(l.c_str(), &st) != 0) return fail(sys_error("stat " + l));
    if (S_ISDIR(st.st_mode)) NSBOX_CHECK(upload_tree(volume, l, r, max, uploaded, skipped));
    else if (S_ISREG(st.st_mode)) uploaded.push_back(uploaded_json(NSBOX_TRY(upload_one(volume, l, r, max))));
    else skipped.push_back(l);
  }
  return {};
}

int files_upload(CommandContext& ctx, FilesVolume& volume, const std::vector<std::string>& args) {
  if (args.empty() || args.size() > 2)
    return ctx.out.error(make_error(ErrorCode::kInvalidArgument, "usage: nsbox files ID upload LOCAL [REMOTE]"));
  const std::string& local = args[0];
  if (local == "-" && args.size() < 2)
    return ctx.out.error(make_error(ErrorCode::kInvalidArgument, "uploading stdin needs a REMOTE name"));
  std::string remote = args.size() == 2 ? args[1] : base_name(local);
  if (!remote.empty() && remote.back() == '/') {  // into that directory, like cp
    if (local == "-")
      return ctx.out.error(make_error(ErrorCode::kInvalidArgument, "'" + remote + "' is a directory; stdin needs a file name"));
    remote += base_name(local);
  }
  auto max_or = max_size(ctx, kDefaultMaxUpload);
  if (!max_or) return ctx.out.error(max_or.error());
  uint64_t max = *max_or;
  struct stat st{};
  if (local != "-" && ::stat(local.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    nlohmann::json uploaded = nlohmann::json::array(), skipped = nlohmann::json::array();
    if (auto r = upload_tree(volume, local, remote, max, uploaded, skipped); !r) return ctx.out.error(r.error());
    if (ctx.out.json) ctx.out.document({{"sandbox_mount_prefix", FilesVolume::kInsidePath}, {"uploaded", uploaded}, {"skipped", skipped}});
    else {
      for (const auto& u : uploaded) ctx.out.line("uploaded " + u["mount_relative_path"].get<std::string>() + " (" + std::to_string(u["size"].get<uint64_t>()) + " bytes)");
      for (const auto& s : skipped) ctx.out.note("skipped " + s.get<std::string>() + " (not a regular file)");
    }
    return 0;
  }
  auto u = upload_one(volume, local, remote, max);
  if (!u) return ctx.out.error(u.error());
  if (ctx.out.json) ctx.out.document(uploaded_json(*u));
  else ctx.out.line("uploaded " + local + " -> " + FilesVolume::inside_path(u->relative) + " (" + std::to_string(u->size) + " bytes, sha256 " + u->sha256 + ")");
  return 0;
}

int files_ls(CommandContext& ctx, FilesVolume& volume, const std::vector<std::string>& args) {
  auto dir_or = args.empty() ? Result<std::string>(".") : remote_path(ctx, args[0]);
  if (!dir_or) return ctx.out.error(dir_or.error());
  const std::string& dir = *dir_or;
  size_t limit = 1000;
  if (ctx.args.values.count("limit")) {
    char* end = nullptr;
    std::string text = ctx.args.value("limit");
    unsigned long v = std::strtoul(text.c_str(), &end, 10);
    if (end == text.c_str() || *end || v == 0 || v > 100000)
      return ctx.out.error(make_error(ErrorCode::kInvalidArgument, "invalid --limit '" + text + "'", "give 1 to 100000"));
    limit = v;
  }
  std::string cursor;
  if (ctx.args.values.count("cursor")) {
    auto decoded = protocol::base64_decode(ctx.args.value("cursor"));
    if (!decoded) return ctx.out.error(make_error(ErrorCode::kInvalidArgument, "invalid --cursor"));
    cursor = *decoded;
  }
  auto page = volume.list(dir, limit, cursor);
  if (!page) return ctx.out.error(page.error());
  std::string next = page->next_cursor.empty() ? "" : protocol::base64_encode(page->next_cursor);
  if (ctx.out.json) {
    nlohmann::json entries = nlohmann::json::array();
    for (const auto& e : page->entries) {
      // A name that is not UTF-8 shows with U+FFFD in "name"; "name_b64" has its bytes.
      nlohmann::json entry = {{"name", e.name}, {"type", e.type}, {"size", e.size},
                              {"allocated_bytes", e.allocated}, {"mtime", e.mtime}};
      if (!protocol::is_valid_utf8(e.name)) entry["name_b64"] = protocol::base64_encode(e.name);
      entries.push_back(std::move(entry));
    }
    ctx.out.document({{"entries", entries}, {"next_cursor", next.empty() ? nlohmann::json(nullptr) : nlohmann::json(next)}});
    return 0;
  }
  for (const auto& e : page->entries) {
    char when[32];
    std::time_t t = e.mtime;
    std::tm tm{};
    ::gmtime_r(&t, &tm);
    std::strftime(when, sizeof when, "%Y-%m-%d %H:%M", &tm);
    char columns[64];
    std::snprintf(columns, sizeof columns, "%-7s %12llu  %s  ", e.type.c_str(), static_cast<unsigned long long>(e.size), when);
    std::string sparse = e.type == "file" && e.allocated < e.size ? "  (sparse: " + format_bytes(e.allocated) + " on disk)" : "";
    ctx.out.line(columns + printable(e.name) + (e.type == "dir" ? "/" : "") + sparse);
  }
  if (!next.empty()) ctx.out.note("more: --cursor " + next);
  return 0;
}

int files_download(CommandContext& ctx, FilesVolume& volume, const std::vector<std::string>& args) {
  if (args.empty() || args.size() > 2)
    return ctx.out.error(make_error(ErrorCode::kInvalidArgument, "usage: nsbox files ID download REMOTE [LOCAL]"));
  auto remote = remote_path(ctx, args[0]);
  if (!remote) return ctx.out.error(remote.error());
  auto limit = max_size(ctx, kDefaultMaxDownload);
  if (!limit) return ctx.out.error(limit.error());
  struct stat st{};
  auto in = volume.open_file(*remote, &st);
  if (!in) return ctx.out.error(in.error());
  std::string shown = printable(*remote);
  uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size > *limit)
    return ctx.out.error(make_error(ErrorCode::kLimitExceeded,
                                    shown + " is " + format_bytes(size) + " (" + format_bytes(static_cast<uint64_t>(st.st_blocks) * 512) +
                                        " on disk), more than the download limit of " + format_bytes(*limit),
                                    "raise it with --max-size"));
  std::string local = args.size() == 2 ? args[1] : base_name(*remote);
  if (local == "-") {
    auto copied = files::copy_stream(in->get(), STDOUT_FILENO, shown, "stdout");
    return copied ? 0 : ctx.out.error(copied.error());
  }
  if (files::exists(local) && !ctx.args.has("force"))
    return ctx.out.error(make_error(ErrorCode::kAlreadyExists, local + " exists", "add --force to replace it"));
  // Written next to its place, then renamed: an interrupted download leaves no half file.
  std::string temp = local + ".nsbox-download." + std::to_string(::getpid());
  UniqueFd out(::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (!out) return ctx.out.error(sys_error("create " + temp));
  auto copied = files::copy_sparse(in->get(), out.get(), size, shown, temp);
  if (!copied) {
    ::unlink(temp.c_str());
    return ctx.out.error(copied.error());
  }
  if (::fsync(out.get()) != 0 || ::rename(temp.c_str(), local.c_str()) != 0) {
    Error e = sys_error("place " + local);
    ::unlink(temp.c_str());
    return ctx.out.error(e);
  }
  if (ctx.out.json) ctx.out.document({{"path", local}, {"size", *copied}});
  else ctx.out.line("downloaded " + printable(FilesVolume::inside_path(*FilesVolume::normalize(*remote))) + " -> " + local + " (" +
                    std::to_string(*copied) + " bytes)");
  return 0;
}

int files_rm(CommandContext& ctx, FilesVolume& volume, const std::vector<std::string>& args) {
  if (args.empty()) return ctx.out.error(make_error(ErrorCode::kInvalidArgument, "usage: nsbox files ID rm PATH... [-r]"));
  nlohmann::json removed = nlohmann::json::array();
  for (const auto& arg : args) {
    auto path = remote_path(ctx, arg);
    if (!path) return ctx.out.error(path.error());
    if (auto r = volume.remove(*path, ctx.args.has("r")); !r) return ctx.out.error(r.error());
    removed.push_back(*path);
  }
  if (ctx.out.json) ctx.out.document({{"removed", removed}});
  return 0;
}

}  // namespace

int cmd_files(const Invocation& inv) {
  int code = 0;
  auto ctx = prepare(inv, code);
  if (!ctx) return code;
  const auto& p = ctx->args.positionals;
  if (p.size() < 2)
    return ctx->out.error(make_error(ErrorCode::kInvalidArgument, "usage: nsbox files ID (upload|ls|download|rm) ...", "see `nsbox help`"));
  std::vector<std::string> rest(p.begin() + 2, p.end());
  const std::string& verb = p[1];
  if (verb != "upload" && verb != "ls" && verb != "download" && verb != "rm")
    return ctx->out.error(make_error(ErrorCode::kInvalidArgument, "unknown files command '" + verb + "'", "use upload, ls, download or rm"));
  auto volume = ctx->runtime->files(p[0]);
  if (!volume) return ctx->out.error(volume.error());
  if (verb == "upload") return files_upload(*ctx, *volume, rest);
  if (verb == "ls") return files_ls(*ctx, *volume, rest);
  if (verb == "download") return files_download(*ctx, *volume, rest);
  return files_rm(*ctx, *volume, rest);
}

int cmd_volume(const Invocation& inv) {
  int code = 0;
  auto ctx = prepare(inv, code);
  if (!ctx) return code;
  const auto& p = ctx->args.positionals;
  if (p.empty() || (p[0] != "ls" && p[0] != "rm"))
    return ctx->out.error(make_error(ErrorCode::kInvalidArgument, "usage: nsbox volume (ls | rm NAME...)"));
  if (p[0] == "rm") {
    if (p.size() < 2) return ctx->out.error(make_error(ErrorCode::kInvalidArgument, "nsbox volume rm takes volume names"));
    for (size_t i = 1; i < p.size(); ++i)
      if (auto r = ctx->runtime->remove_volume(p[i]); !r) return ctx->out.error(r.error());
    if (ctx->out.json) ctx->out.document({{"removed", std::vector<std::string>(p.begin() + 1, p.end())}});
    return 0;
  }
  auto volumes = ctx->runtime->volumes();
  if (!volumes) return ctx->out.error(volumes.error());
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& v : *volumes)
    if (v.named) arr.push_back(v.to_json());
  if (ctx->out.json) {
    ctx->out.document({{"volumes", arr}});
    return 0;
  }
  for (const auto& v : arr)
    ctx->out.line(v["name"].get<std::string>() + "  " + v["kind"].get<std::string>() +
                  (v["quota_bytes"].get<uint64_t>() ? "  quota " + format_bytes(v["quota_bytes"].get<uint64_t>()) : "") +
                  "  created " + v["created_at"].get<std::string>());
  return 0;
}

}  // namespace nsbox::cli
