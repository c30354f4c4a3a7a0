// Where images come from, as `nsbox image pull` names them:
//
//   oci:DIR[:REF]             an OCI image layout directory (REF: its index's
//                             org.opencontainers.image.ref.name; needed when it holds several)
//   DIR                       the same, a directory given as it is
//   oci-archive:FILE[:REF]    a tar of a layout (podman save --format oci-archive)
//   docker-archive:FILE[:NAME] what `docker save` and `podman save` write (NAME: one of its
//                             RepoTags, when it holds several images)
//   docker://HOST/NAME[:TAG|@DIGEST]  a registry (not yet: refused, saying so)
//
// An archive is unpacked into the store's staging first, by nsbox-archive as the sandbox
// user. Each document is read bounded and checked against the digest that names it
// before it is parsed; layers are handed to the store as open files, which it hashes as
// it copies them.
#pragma once

#include <string>
#include <vector>

#include "isolation/sys/error.h"
#include "runtime/images/image_store.h"

namespace nsbox::images {

// `names`: names the image is to have besides those the source records (--name).
Result<ImageRecord> pull(ImageStore& store, const std::string& source, const std::vector<std::string>& names);

// The host's architecture as OCI writes it ("amd64", "arm64").
std::string host_architecture();

}  // namespace nsbox::images
