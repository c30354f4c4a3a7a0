#include "mounts/bucket/bucket_client.h"

namespace nsbox::bucket {

std::unique_ptr<BucketClient> make_client(const BucketMount& mount, const BucketCredentials& credentials,
                                          HttpLimits limits) {
  if (mount.kind == BucketKind::kAzureBlob) return make_azure_client(mount, credentials, limits);
  return make_s3_client(mount, credentials, limits);
}

}  // namespace nsbox::bucket
