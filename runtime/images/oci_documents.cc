#include "runtime/images/oci_documents.h"

#include <nlohmann/json.hpp>

namespace nsbox::images {
namespace {

using json = nlohmann::json;

Result<json> parse(const std::string& text, const std::string& what) {
  if (text.size() > kMaxDocumentBytes)
    return fail(make_error(ErrorCode::kLimitExceeded, what + " is larger than " + std::to_string(kMaxDocumentBytes >> 20) + " MiB"));
  auto j = json::parse(text, nullptr, false);
  if (j.is_discarded()) return fail(make_error(ErrorCode::kInvalidArgument, what + " is not JSON"));
  return j;
}

Error malformed(const std::string& what, const std::string& why) {
  return make_error(ErrorCode::kInvalidArgument, what + " is malformed: " + why);
}

std::string text_of(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

Result<Descriptor> descriptor(const json& j, const std::string& what) {
  if (!j.is_object()) return fail(malformed(what, "a descriptor is not an object"));
  Descriptor d;
  d.media_type = text_of(j, "mediaType");
  d.digest = text_of(j, "digest");
  NSBOX_CHECK_CTX(digest_hex(d.digest), what);
  auto size = j.find("size");
  if (size == j.end() || !size->is_number_unsigned()) return fail(malformed(what, "a descriptor has no size"));
  d.size = size->get<uint64_t>();
  if (auto a = j.find("annotations"); a != j.end() && a->is_object())
    for (const auto& [k, v] : a->items())
      if (v.is_string()) d.annotations[k] = v.get<std::string>();
  if (auto p = j.find("platform"); p != j.end() && p->is_object()) {
    d.os = text_of(*p, "os");
    d.architecture = text_of(*p, "architecture");
  }
  return d;
}

std::vector<std::string> strings(const json& j, const char* key) {
  std::vector<std::string> out;
  if (auto it = j.find(key); it != j.end() && it->is_array())
    for (const auto& v : *it)
      if (v.is_string()) out.push_back(v.get<std::string>());
  return out;
}

}  // namespace

Result<std::string> digest_hex(const std::string& digest) {
  const std::string prefix = "sha256:";
  bool ok = digest.size() == prefix.size() + 64 && digest.starts_with(prefix);
  for (size_t i = prefix.size(); ok && i < digest.size(); ++i)
    ok = (digest[i] >= '0' && digest[i] <= '9') || (digest[i] >= 'a' && digest[i] <= 'f');
  if (!ok)
    return fail(make_error(ErrorCode::kInvalidArgument, "'" + digest.substr(0, 80) + "' is not a sha256 digest (only sha256 is read)"));
  return digest.substr(prefix.size());
}

bool is_index(const std::string& media_type) {
  return media_type == "application/vnd.oci.image.index.v1+json" ||
         media_type == "application/vnd.docker.distribution.manifest.list.v2+json";
}

Result<std::vector<Descriptor>> parse_index(const std::string& text) {
  json j = NSBOX_TRY(parse(text, "the image index"));
  auto m = j.find("manifests");
  if (!j.is_object() || m == j.end() || !m->is_array()) return fail(malformed("the image index", "no manifests"));
  std::vector<Descriptor> out;
  for (const auto& d : *m) out.push_back(NSBOX_TRY(descriptor(d, "the image index")));
  return out;
}

Result<Manifest> parse_manifest(const std::string& text) {
  json j = NSBOX_TRY(parse(text, "the image manifest"));
  if (!j.is_object()) return fail(malformed("the image manifest", "not an object"));
  if (j.value("schemaVersion", 0) != 2) return fail(malformed("the image manifest", "schemaVersion is not 2"));
  auto c = j.find("config");
  auto l = j.find("layers");
  if (c == j.end() || l == j.end() || !l->is_array()) return fail(malformed("the image manifest", "no config or no layers"));
  Manifest out;
  out.config = NSBOX_TRY(descriptor(*c, "the image manifest"));
  for (const auto& d : *l) out.layers.push_back(NSBOX_TRY(descriptor(d, "the image manifest")));
  return out;
}

Result<ImageConfig> parse_config(const std::string& text) {
  json j = NSBOX_TRY(parse(text, "the image config"));
  if (!j.is_object()) return fail(malformed("the image config", "not an object"));
  ImageConfig out;
  out.os = text_of(j, "os");
  out.architecture = text_of(j, "architecture");
  auto rootfs = j.find("rootfs");
  if (rootfs == j.end() || !rootfs->is_object() || text_of(*rootfs, "type") != "layers")
    return fail(malformed("the image config", "no rootfs of type layers"));
  for (const auto& id : strings(*rootfs, "diff_ids")) out.diff_ids.push_back(NSBOX_TRY(digest_hex(id)));
  if (auto c = j.find("config"); c != j.end() && c->is_object()) {
    out.env = strings(*c, "Env");
    out.working_dir = text_of(*c, "WorkingDir");
    out.user = text_of(*c, "User");
  }
  return out;
}

Result<std::vector<DockerArchiveImage>> parse_docker_manifest(const std::string& text) {
  json j = NSBOX_TRY(parse(text, "the archive's manifest.json"));
  if (!j.is_array() || j.empty()) return fail(malformed("the archive's manifest.json", "not a list of images"));
  std::vector<DockerArchiveImage> out;
  for (const auto& e : j) {
    if (!e.is_object()) return fail(malformed("the archive's manifest.json", "an entry is not an object"));
    DockerArchiveImage image{text_of(e, "Config"), strings(e, "RepoTags"), strings(e, "Layers")};
    if (image.config.empty()) return fail(malformed("the archive's manifest.json", "an image has no Config"));
    out.push_back(std::move(image));
  }
  return out;
}

}  // namespace nsbox::images
