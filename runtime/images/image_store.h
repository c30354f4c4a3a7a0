// The images a state root holds (docs/images.md): content-addressed, verified, shared.
//
//   <data>/images/blobs/sha256/<hex>   every blob as pulled (manifests, configs, layers)
//   <data>/images/layers/<diff_id>/    each layer's tree, unpacked once (image_layer.h)
//   <data>/images/trees/<id>/          each image's root, merged from its layers by hard
//                                      links (image_tree.h): a sandbox's read-only lower
//   <data>/images/records/<id>.json    what an image is: names, layers, config
//
// An image's id is its config's digest. Every blob of every pull is hashed before use:
// each layer against its manifest's digest and size and, unpacked or not, its
// uncompressed bytes against the config's diff_id, even when the layer is stored already;
// a mismatch refuses the whole pull, and what the pull added is removed (nothing is
// listed). Layers are unpacked and trees merged by nsbox-archive as the sandbox user,
// never as root: every image file belongs to the sandbox user. One pull or removal at a
// time per state root (a lock file).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "isolation/sys/error.h"
#include "isolation/sys/unique_fd.h"
#include "isolation/userns.h"
#include "runtime/images/oci_documents.h"

namespace nsbox::images {

struct LayerRef {
  std::string diff_id;  // hex
  std::string digest;   // the blob's, "sha256:..."
  uint64_t size = 0;    // the blob's bytes
  uint64_t bytes = 0;   // its files' bytes, unpacked
};

struct ImageRecord {
  std::string id;  // the config's sha256 hex
  std::vector<std::string> names;
  std::string manifest_digest;  // "sha256:..."; empty for a docker-archive's image
  std::vector<LayerRef> layers;
  ImageConfig config;
  std::string source;  // where it was pulled from, as given
  std::string pulled_at;
  uint64_t bytes() const;
  nlohmann::json to_json() const;
  static Result<ImageRecord> from_json(const nlohmann::json& j);
};

// What a source found (image_sources.h): the documents' text, read and checked against
// their digests, and where each layer's blob is, with what must name it.
struct ImportPlan {
  std::string config_text;
  std::string manifest_text;  // empty: none (a docker-archive)
  struct Layer {
    UniqueFd blob;       // opened by the source, without following a link out of it
    std::string digest;  // what must name its bytes; empty: none (a docker-archive's layer)
    uint64_t size = 0;   // what its size must be; 0: not said
  };
  std::vector<Layer> layers;
  std::vector<std::string> names;
  std::string source;
};

// "name[:tag]" as nsbox records it: lowercase registry/path components and a tag
// (":latest" when none is given), or the reason it is refused.
Result<std::string> normalize_name(const std::string& name);

class ImageStore {
 public:
  ImageStore(std::string data_dir, std::string archiver, userns::HostIds ids)
      : data_dir_(std::move(data_dir)), dir_(data_dir_ + "/images"), archiver_(std::move(archiver)), ids_(ids) {}

  Result<ImageRecord> add(const ImportPlan& plan);
  Result<std::vector<ImageRecord>> list() const;
  // A name ("python" is "python:latest"), an id or its first 12+ hex digits, or a
  // "sha256:" digest of a config or a manifest.
  Result<ImageRecord> resolve(const std::string& ref) const;
  // The image, its tree, and whatever layer and blob no other image has.
  Result<ImageRecord> remove(const std::string& ref);
  // An image's merged tree, in a state root's data directory (what a supervisor knows).
  static std::string tree_in(const std::string& data_dir, const std::string& id) { return data_dir + "/images/trees/" + id; }
  std::string tree(const std::string& id) const { return tree_in(data_dir_, id); }
  // A scratch directory for a source's staging, in the store (removed by the caller, or by
  // the next removal's collection if it could not).
  Result<std::string> make_staging() const;
  // A tar archive (an oci-archive, a docker-archive) unpacked into `dir` by nsbox-archive,
  // as the sandbox user: regular files, directories and links that stay inside only.
  Result<void> unpack_archive(const std::string& file, const std::string& dir) const;

 private:
  std::string blob_path(const std::string& hex) const { return dir_ + "/blobs/sha256/" + hex; }
  std::string layer_dir(const std::string& diff_id) const { return dir_ + "/layers/" + diff_id; }
  std::string record_path(const std::string& id) const { return dir_ + "/records/" + id + ".json"; }
  Result<void> prepare_dirs() const;
  Result<ImageRecord> add_locked(const ImportPlan& plan, std::vector<std::string>& made);
  Result<nlohmann::json> archive(std::vector<std::string> argv, const std::string& what) const;
  Result<std::string> make_owned_dir(const std::string& parent) const;
  Result<void> collect_garbage() const;
  std::string data_dir_;
  std::string dir_;  // data_dir_/images
  std::string archiver_;
  userns::HostIds ids_;
};

}  // namespace nsbox::images
