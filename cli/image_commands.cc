// nsbox image: pull, ls, inspect, rm (docs/images.md).
#include "cli/commands.h"
#include "cli/context.h"
#include "cli/output.h"
#include "runtime/images/image_sources.h"

namespace nsbox::cli {
namespace {

std::string short_id(const images::ImageRecord& r) { return r.id.substr(0, 12); }

std::string names_of(const images::ImageRecord& r) {
  std::string out;
  for (const auto& n : r.names) out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? "<none>" : out;
}

}  // namespace

int cmd_image(const Invocation& inv) {
  int code = 0;
  auto ctx = prepare(inv, code);
  if (!ctx) return code;
  const auto& p = ctx->args.positionals;
  const std::string usage = "usage: nsbox image (pull SOURCE [--name NAME]... | ls | inspect IMAGE | rm IMAGE...)";
  if (p.empty()) return ctx->out.error(make_error(ErrorCode::kInvalidArgument, usage));
  auto store = ctx->runtime->images();
  const std::string& verb = p[0];
  if (verb == "pull") {
    if (p.size() != 2) return ctx->out.error(make_error(ErrorCode::kInvalidArgument, "nsbox image pull takes one SOURCE", usage));
    std::vector<std::string> names;
    if (auto it = ctx->args.values.find("name"); it != ctx->args.values.end()) names = it->second;
    auto image = images::pull(store, p[1], names);
    if (!image) return ctx->out.error(image.error());
    if (ctx->out.json) ctx->out.document(image->to_json());
    else ctx->out.line(short_id(*image) + "  " + names_of(*image));
    return 0;
  }
  if (verb == "ls") {
    auto list = store.list();
    if (!list) return ctx->out.error(list.error());
    nlohmann::json arr = nlohmann::json::array();
    for (const auto& r : *list) arr.push_back(r.to_json());
    if (ctx->out.json) {
      ctx->out.document({{"images", arr}});
      return 0;
    }
    for (const auto& r : *list)
      ctx->out.line(short_id(r) + "  " + format_bytes(r.bytes()) + "  " + std::to_string(r.layers.size()) + " layers  " + r.pulled_at +
                    "  " + names_of(r));
    return 0;
  }
  if (verb == "inspect") {
    if (p.size() != 2) return ctx->out.error(make_error(ErrorCode::kInvalidArgument, "nsbox image inspect takes one IMAGE", usage));
    auto image = store.resolve(p[1]);
    if (!image) return ctx->out.error(image.error());
    nlohmann::json j = image->to_json();
    j["tree"] = store.tree(image->id);
    ctx->out.document(j);  // JSON either way: it is for reading closely
    return 0;
  }
  if (verb == "rm") {
    if (p.size() < 2) return ctx->out.error(make_error(ErrorCode::kInvalidArgument, "nsbox image rm takes images", usage));
    nlohmann::json removed = nlohmann::json::array();
    for (size_t i = 1; i < p.size(); ++i) {
      auto image = ctx->runtime->remove_image(p[i]);
      if (!image) return ctx->out.error(image.error());
      removed.push_back("sha256:" + image->id);
      if (!ctx->out.json) ctx->out.line(short_id(*image));
    }
    if (ctx->out.json) ctx->out.document({{"removed", removed}});
    return 0;
  }
  return ctx->out.error(make_error(ErrorCode::kInvalidArgument, "unknown image command '" + verb + "'", usage));
}

}  // namespace nsbox::cli
