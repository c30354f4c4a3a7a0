// Real object stores for tests: s3rver (S3) and Azurite (Azure Blob), each a node process
// of its own on 127.0.0.1 with a fresh data directory, stopped and removed with the object.
//
//   S3rverPeer s3({"photos"});            // bucket "photos" exists
//   run_process({..., "--endpoint", s3.endpoint()});
//   AzuritePeer az;                       // account devstoreaccount1, no containers
//
// The peers come from tests/peers/node_modules, which scripts/install-deps installs. A test
// that starts one says so first with NSBOX_NEEDS(node_peers()) (tests/support/
// host_features.h): under CTest (`make test`, which installs them) a missing peer fails it;
// a test binary run by hand skips it and says why, never silently. Starting a peer that
// is missing fails the test regardless.
//
// A peer is its own process group and dies with the thread that started it
// (PR_SET_PDEATHSIG), so a crashed test leaves nothing running. Start peers from the test's
// own thread, not from a short-lived std::thread, or they die when that thread ends.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tests/support/process.h"

namespace nsbox::test {

// Whether tests/peers/node_modules holds both peers.
bool peers_installed();

class PeerProcess;

class S3rverPeer {
 public:
  // Creates `buckets` at start-up (names must be valid S3 bucket names).
  // With a `service_endpoint` (e.g. "localhost"), it also answers virtual-host requests:
  // bucket B at host B.s3.<service_endpoint>.
  explicit S3rverPeer(const std::vector<std::string>& buckets = {}, const std::string& service_endpoint = "");
  ~S3rverPeer();
  S3rverPeer(const S3rverPeer&) = delete;
  S3rverPeer& operator=(const S3rverPeer&) = delete;

  std::string endpoint() const;  // "http://127.0.0.1:PORT"
  int port() const { return port_; }
  pid_t pid() const;
  bool running() const;
  // Where s3rver keeps the buckets: DIR/<bucket>/<key>._S3rver_object and its metadata.
  const std::string& data_dir() const;
  static constexpr std::string_view access_key() { return "S3RVER"; }
  static constexpr std::string_view secret_key() { return "S3RVER"; }
  // Its stdout and stderr so far, for a failing test's INFO.
  std::string log() const;

  // SIGTERM, up to 5 s to exit, then SIGKILL; reaped. Idempotent.
  void stop();
  // SIGKILL and reap at once: the store vanishing mid-operation.
  void kill_now();

 private:
  std::unique_ptr<PeerProcess> process_;
  int port_ = 0;
};

class AzuritePeer {
 public:
  AzuritePeer();
  ~AzuritePeer();
  AzuritePeer(const AzuritePeer&) = delete;
  AzuritePeer& operator=(const AzuritePeer&) = delete;

  // "http://127.0.0.1:PORT": path style, so a blob is ENDPOINT/devstoreaccount1/CONTAINER/BLOB.
  std::string endpoint() const;
  int port() const { return port_; }
  pid_t pid() const;
  bool running() const;
  const std::string& data_dir() const;
  // Azurite's well-known development account; it enforces SharedKey and SAS with it.
  static constexpr std::string_view account() { return "devstoreaccount1"; }
  static constexpr std::string_view account_key() {
    return "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";
  }
  std::string log() const;

  void stop();
  void kill_now();

 private:
  std::unique_ptr<PeerProcess> process_;
  int port_ = 0;
};

// boto3 (Debian's python3-boto3) on the host side, the way a user's own code sees the
// bucket: `code` runs with `s3` a client of `peer` and sys and hashlib imported.
ProcessResult s3_boto(const S3rverPeer& peer, const std::string& code, const std::string& stdin_data = "");

// What `nsbox create --mount` against `peer` needs in its environment, with `secret` as
// the secret key (s3rver checks no signature: a test makes it one easy to search for).
std::vector<std::string> s3_credentials_env(const S3rverPeer& peer, const std::string& secret);

}  // namespace nsbox::test
