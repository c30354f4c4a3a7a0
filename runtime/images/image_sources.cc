#include "runtime/images/image_sources.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "isolation/subordinate_ids.h"
#include "isolation/sys/files.h"
#include "isolation/sys/sha256.h"

namespace nsbox::images {
namespace {

// A file of the layout or archive `root`, resolved inside it (a link in it may point
// anywhere in it, never out).
Result<UniqueFd> open_in(int root, const std::string& path, const std::string& what) {
  open_how how{};
  how.flags = O_RDONLY | O_CLOEXEC;
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV;
  UniqueFd fd(static_cast<int>(::syscall(SYS_openat2, root, path.c_str(), &how, sizeof how)));
  if (!fd) return fail(sys_error("open " + what + " (" + path.substr(0, 200) + ")"));
  return fd;
}

Result<std::string> read_in(int root, const std::string& path, const std::string& what) {
  UniqueFd fd = NSBOX_TRY(open_in(root, path, what));
  struct stat st{};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) return fail(make_error(ErrorCode::kInvalidArgument, what + " is not a file"));
  if (static_cast<uint64_t>(st.st_size) > kMaxDocumentBytes)
    return fail(make_error(ErrorCode::kLimitExceeded, what + " is larger than " + std::to_string(kMaxDocumentBytes >> 20) + " MiB"));
  return files::read_all(fd.get(), kMaxDocumentBytes, what);
}

// A layout's blob named by `d`, read and checked against its digest and size.
Result<std::string> read_blob(int root, const Descriptor& d, const std::string& what) {
  std::string hex = NSBOX_TRY(digest_hex(d.digest));
  std::string text = NSBOX_TRY(read_in(root, "blobs/sha256/" + hex, what));
  std::string got = sha256_hex(text);
  if (got != hex)
    return fail(make_error(ErrorCode::kInvalidArgument, what + " does not match its digest: expected " + d.digest + ", got sha256:" + got,
                           "the image was changed or damaged after it was made; nothing of this pull was kept"));
  if (d.size && d.size != text.size())
    return fail(make_error(ErrorCode::kInvalidArgument, what + " has " + std::to_string(text.size()) + " bytes; its descriptor says " +
                                                            std::to_string(d.size)));
  return text;
}

std::string ref_name(const Descriptor& d) {
  for (const char* key : {"io.containerd.image.name", "org.opencontainers.image.ref.name"})
    if (auto it = d.annotations.find(key); it != d.annotations.end()) return it->second;
  return "";
}

// The manifest an index names for `ref` (or its only one), down through nested indexes to
// this host's platform.
Result<std::pair<Descriptor, std::string>> choose_manifest(int root, const std::string& ref) {
  auto entries = NSBOX_TRY(parse_index(NSBOX_TRY(read_in(root, "index.json", "the layout's index.json"))));
  std::vector<Descriptor> chosen;
  for (const auto& d : entries) {
    std::string name = ref_name(d);
    if (ref.empty() || name == ref || name.ends_with(":" + ref)) chosen.push_back(d);
  }
  if (chosen.size() != 1) {
    std::string names;
    for (const auto& d : entries) names += (names.empty() ? "" : ", ") + (ref_name(d).empty() ? d.digest.substr(0, 19) : ref_name(d));
    return fail(make_error(chosen.empty() ? ErrorCode::kNotFound : ErrorCode::kInvalidArgument,
                           chosen.empty() ? "the layout has no image '" + ref + "'" : "the layout holds several images",
                           "name one after the path (oci:DIR:NAME): " + names.substr(0, 400)));
  }
  Descriptor d = chosen.front();
  std::string name = ref_name(d);
  for (int depth = 0; is_index(d.media_type); ++depth) {
    if (depth > 4) return fail(make_error(ErrorCode::kInvalidArgument, "image indexes nest deeper than 4"));
    auto nested = NSBOX_TRY(parse_index(NSBOX_TRY(read_blob(root, d, "an image index"))));
    const std::string arch = host_architecture();
    auto it = std::find_if(nested.begin(), nested.end(), [&](const Descriptor& n) { return n.os == "linux" && n.architecture == arch; });
    if (it == nested.end()) return fail(make_error(ErrorCode::kNotFound, "the image has no variant for linux/" + arch));
    d = *it;
  }
  return std::pair{d, name};
}

Result<ImportPlan> from_layout(int root, const std::string& ref) {
  auto [chosen, name] = NSBOX_TRY(choose_manifest(root, ref));
  ImportPlan plan;
  plan.manifest_text = NSBOX_TRY(read_blob(root, chosen, "the image manifest"));
  Manifest manifest = NSBOX_TRY(parse_manifest(plan.manifest_text));
  plan.config_text = NSBOX_TRY(read_blob(root, manifest.config, "the image config"));
  for (size_t i = 0; i < manifest.layers.size(); ++i) {
    const auto& l = manifest.layers[i];
    std::string hex = NSBOX_TRY(digest_hex(l.digest));
    plan.layers.push_back({NSBOX_TRY(open_in(root, "blobs/sha256/" + hex, "layer " + std::to_string(i + 1))), l.digest, l.size});
  }
  if (!name.empty()) plan.names.push_back(name);
  return plan;
}

Result<ImportPlan> from_docker_layout(int root, const std::string& ref) {
  auto images = NSBOX_TRY(parse_docker_manifest(NSBOX_TRY(read_in(root, "manifest.json", "the archive's manifest.json"))));
  const DockerArchiveImage* chosen = images.size() == 1 && ref.empty() ? &images.front() : nullptr;
  std::string wanted = ref.empty() ? "" : normalize_name(ref).value_or(ref);
  for (const auto& image : images)
    for (const auto& tag : image.repo_tags)
      if (!ref.empty() && (tag == ref || normalize_name(tag).value_or(tag) == wanted)) chosen = &image;
  if (!chosen) {
    std::string tags;
    for (const auto& image : images)
      for (const auto& tag : image.repo_tags) tags += (tags.empty() ? "" : ", ") + tag;
    return fail(make_error(ref.empty() ? ErrorCode::kInvalidArgument : ErrorCode::kNotFound,
                           ref.empty() ? "the archive holds several images" : "the archive has no image '" + ref + "'",
                           "name one after the path (docker-archive:FILE:NAME): " + tags.substr(0, 400)));
  }
  ImportPlan plan;
  plan.config_text = NSBOX_TRY(read_in(root, chosen->config, "the image config"));
  for (size_t i = 0; i < chosen->layers.size(); ++i)
    plan.layers.push_back({NSBOX_TRY(open_in(root, chosen->layers[i], "layer " + std::to_string(i + 1))), "", 0});
  plan.names = chosen->repo_tags;
  return plan;
}

// "PATH[:REF]" with PATH an existing file or directory: the longest prefix that exists.
std::pair<std::string, std::string> split_ref(const std::string& rest) {
  if (files::exists(rest)) return {rest, ""};
  size_t colon = rest.rfind(':');
  if (colon == std::string::npos || rest.find('/', colon) != std::string::npos) return {rest, ""};
  return {rest.substr(0, colon), rest.substr(colon + 1)};
}

}  // namespace

std::string host_architecture() {
  utsname u{};
  ::uname(&u);
  std::string m = u.machine;
  if (m == "x86_64") return "amd64";
  if (m == "aarch64") return "arm64";
  return m;
}

Result<ImageRecord> pull(ImageStore& store, const std::string& source, const std::vector<std::string>& names) {
  std::string kind = "oci", rest = source;
  for (const char* prefix : {"oci:", "oci-archive:", "docker-archive:", "docker://"})
    if (source.starts_with(prefix)) {
      kind = std::string(prefix).substr(0, std::string(prefix).find(':'));
      rest = source.substr(std::string(prefix).size());
    }
  if (kind == "docker")
    return fail(make_error(ErrorCode::kUnsupported, "pulls from a registry are not built yet",
                           "save the image where it is (docker save, podman save, skopeo copy ... oci:DIR) and pull that"));
  auto [path, ref] = split_ref(rest);
  std::string staging;
  auto plan = [&]() -> Result<ImportPlan> {
    std::string dir = path;
    if (kind != "oci") {
      staging = NSBOX_TRY(store.make_staging());
      NSBOX_CHECK(store.unpack_archive(path, staging));
      dir = staging;
    }
    UniqueFd root(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!root) return fail(sys_error("open " + path));
    if (kind == "docker-archive") return from_docker_layout(root.get(), ref);
    return from_layout(root.get(), ref);
  }();
  auto added = [&]() -> Result<ImageRecord> {
    if (!plan) return fail(std::move(plan.error()).context("pull " + source));
    plan->source = source;
    std::vector<std::string> all;
    for (const auto& n : plan->names) {
      // A layout's bare tag ("latest", as skopeo writes it) names nothing by itself: the
      // directory's name with it.
      bool bare = n.find('/') == std::string::npos && n.find(':') == std::string::npos;
      std::string base = path.substr(path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/') + 1);
      if (kind != "oci" && base.ends_with(".tar")) base.resize(base.size() - 4);
      if (auto normal = normalize_name(bare ? base + ":" + n : n)) all.push_back(*normal);
    }
    for (const auto& n : names) all.push_back(NSBOX_TRY(normalize_name(n)));
    std::sort(all.begin(), all.end());
    all.erase(std::unique(all.begin(), all.end()), all.end());
    plan->names = all;
    auto r = store.add(*plan);
    if (!r) return fail(std::move(r.error()).context("pull " + source));
    return r;
  }();
  if (!staging.empty()) (void)subids::remove_tree(staging);
  return added;
}

}  // namespace nsbox::images
