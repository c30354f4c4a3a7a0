// The documents that describe an image, as OCI (image-spec 1.1) and Docker (image
// manifest v2 schema 2, `docker save`'s manifest.json) write them: read, checked for what
// nsbox relies on, bounded. Where they come from (a layout directory, an archive, a
// registry) is image_sources.h's; what is kept, image_store.h's.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "isolation/sys/error.h"

namespace nsbox::images {

constexpr size_t kMaxDocumentBytes = 4 << 20;

// "sha256:<64 lowercase hex>" -> the hex; anything else is refused (no other algorithm).
Result<std::string> digest_hex(const std::string& digest);

struct Descriptor {
  std::string media_type;
  std::string digest;  // "sha256:..."
  uint64_t size = 0;
  std::map<std::string, std::string> annotations;
  std::string os, architecture;  // an index's platform, if it says
};

bool is_index(const std::string& media_type);

// index.json of a layout, or an image index: its manifests.
Result<std::vector<Descriptor>> parse_index(const std::string& text);

struct Manifest {
  Descriptor config;
  std::vector<Descriptor> layers;
};
Result<Manifest> parse_manifest(const std::string& text);

// What nsbox applies of the image's config, and the layers' ids it checks.
struct ImageConfig {
  std::vector<std::string> diff_ids;  // hex, bottom first
  std::vector<std::string> env;       // "K=V"
  std::string working_dir;
  std::string user;
  std::string os, architecture;
};
Result<ImageConfig> parse_config(const std::string& text);

// One image of `docker save`'s manifest.json: paths inside the archive.
struct DockerArchiveImage {
  std::string config;
  std::vector<std::string> repo_tags;
  std::vector<std::string> layers;
};
Result<std::vector<DockerArchiveImage>> parse_docker_manifest(const std::string& text);

}  // namespace nsbox::images
