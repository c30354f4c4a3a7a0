// The workspace root as one tar archive (docs/semantics.md, "Workspace archives"):
//
//   nsbox workspace ID export FILE|-   -> the archive, into FILE (whole or not at all) or stdout
//   nsbox workspace ID import FILE|-   -> the running sandbox's workspace replaced by it
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>

#include "cli/context.h"
#include "isolation/sys/syscall.h"

namespace nsbox::cli {
namespace {

// "5 members, 7 bytes", and what packing left out (links out of the root, FIFOs...).
std::string summary(const nlohmann::json& report) {
  std::string text = std::to_string(report.value("members", 0ull)) + " members, " + std::to_string(report.value("bytes", 0ull)) + " bytes";
  if (uint64_t skipped = report.value("skipped", 0ull)) {
    text += "; " + std::to_string(skipped) + " left out";
    const auto& named = report.value("left_out", nlohmann::json::array());
    if (!named.empty() && named[0].is_string()) text += " (" + printable(named[0].get<std::string>()) + (skipped > 1 ? ", ..." : "") + ")";
  }
  return text;
}

int export_workspace(CommandContext& ctx, const std::string& sandbox, const std::string& file) {
  if (file == "-") {
    auto packed = ctx.runtime->workspace_archive(sandbox, STDOUT_FILENO);
    return packed ? 0 : ctx.out.error(packed.error());
  }
  // Beside its place, renamed into it once whole: a failure leaves no partial archive.
  const std::string temp = file + ".nsbox-" + sys::random_hex(4);
  UniqueFd out(::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (!out) return ctx.out.error(sys_error("create " + temp));
  auto packed = ctx.runtime->workspace_archive(sandbox, out.get());
  if (packed && ::fsync(out.get()) != 0) packed = fail(sys_error("fsync " + temp));
  if (packed && ::rename(temp.c_str(), file.c_str()) != 0) packed = fail(sys_error("rename " + temp + " to " + file));
  if (!packed) {
    ::unlink(temp.c_str());
    return ctx.out.error(packed.error());
  }
  if (ctx.out.json) ctx.out.document(*packed);
  else ctx.out.line("exported " + summary(*packed) + " -> " + file);
  return 0;
}

int import_workspace(CommandContext& ctx, const std::string& sandbox, const std::string& file) {
  UniqueFd in(file == "-" ? ::dup(STDIN_FILENO) : ::open(file.c_str(), O_RDONLY | O_CLOEXEC));
  if (!in) return ctx.out.error(sys_error("open " + (file == "-" ? std::string("stdin") : file)));
  auto replaced = ctx.runtime->replace_workspace(sandbox, in.get());
  if (!replaced) return ctx.out.error(replaced.error());
  if (ctx.out.json) ctx.out.document(*replaced);
  else ctx.out.line("imported " + summary(*replaced) + " into " + replaced->value("path", ""));
  return 0;
}

}  // namespace

int cmd_workspace(const Invocation& inv) {
  int code = 0;
  auto ctx = prepare(inv, code);
  if (!ctx) return code;
  const auto& pos = ctx->args.positionals;
  if (pos.size() != 3 || (pos[1] != "export" && pos[1] != "import"))
    return ctx->out.error(make_error(ErrorCode::kInvalidArgument, "nsbox workspace takes ID, then export FILE|- or import FILE|-"));
  return pos[1] == "export" ? export_workspace(*ctx, pos[0], pos[2]) : import_workspace(*ctx, pos[0], pos[2]);
}

}  // namespace nsbox::cli
