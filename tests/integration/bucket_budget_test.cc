// What a bucket mount's server lets a sandbox make it stage and upload (the mount's
// staging budget, `staging_bytes`), and the errnos its callers see at that bound and when
// an object changes under a reader: against s3rver and Azurite, from inside real
// sandboxes, the bucket read back from the host.
#include <sys/mman.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "isolation/sys/files.h"
#include "isolation/sys/unique_fd.h"
#include "mounts/bucket/azure_shared_key.h"
#include "mounts/bucket/bucket_client.h"
#include "mounts/bucket/crypto.h"
#include "mounts/http/client.h"
#include "mounts/bucket/sigv4.h"
#include "tests/support/host_features.h"
#include "tests/support/nsbox_cli.h"
#include "tests/support/object_store_peers.h"

using namespace nsbox::test;
using nlohmann::json;

namespace {

constexpr const char* kSecret = "nsbox-test-secret-budget-41c7";

std::string create_with(TestRoot& root, const S3rverPeer& s3, const std::vector<std::string>& args) {
  std::vector<std::string> all = {"create"};
  all.insert(all.end(), args.begin(), args.end());
  auto r = root.nsbox(all, {.extra_env = s3_credentials_env(s3, kSecret)});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  return r.out.substr(0, r.out.find('\n'));
}

// A Python program run in the sandbox, its stdin a here-document: `attempt(what, f)`
// prints "what ok" or "what ERRNO_NAME" for what f raises.
ProcessResult python_in(TestRoot& root, const std::string& id, const std::string& body) {
  std::string program = "import errno, os\n"
                        "def attempt(what, f):\n"
                        "    try:\n"
                        "        f()\n"
                        "        print(what, 'ok', flush=True)\n"
                        "    except OSError as e:\n"
                        "        print(what, errno.errorcode[e.errno], flush=True)\n" +
                        body;
  return root.sh(id, "python3 - <<'EOF'\n" + program + "\nEOF", {}, {.timeout_s = 240});
}

// key -> size, of every object in the bucket.
json object_sizes(const S3rverPeer& s3, const std::string& bucket) {
  auto r = s3_boto(s3, "import json\nprint(json.dumps({o['Key']: o['Size'] for o in s3.list_objects_v2(Bucket='" + bucket +
                           "').get('Contents', [])}))");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  return json::parse(r.out);
}

}  // namespace

TEST_CASE("one syscall cannot make a bucket server stage and upload past the mount's budget, a truncate or a far pwrite is EFBIG", "[s3]") {
  NSBOX_NEEDS(node_peers());
  NSBOX_NEEDS(fuse_device());
  S3rverPeer s3({"budget"});
  TestRoot root;
  auto id = create_with(root, s3, {"--mount", "s3://budget:/data:rw:staging_bytes=64M"});
  auto info = TestRoot::json(root.nsbox({"inspect", "--json", id}));
  CHECK(info["mounts"][0]["staging_bytes"] == 64ull << 20);

  auto r = python_in(root, id,
                     "open('/data/t', 'w').close()\n"
                     "attempt('truncate 256M', lambda: os.truncate('/data/t', 256 << 20))\n"
                     "fd = os.open('/data/p', os.O_WRONLY | os.O_CREAT)\n"
                     "attempt('pwrite at 200M', lambda: os.pwrite(fd, b'x', 200 << 20))\n"
                     "attempt('ftruncate 100M', lambda: os.ftruncate(fd, 100 << 20))\n"
                     "attempt('pwrite at 1M', lambda: os.pwrite(fd, b'x', 1 << 20))\n"
                     "attempt('close', lambda: os.close(fd))\n"
                     "attempt('truncate 32M', lambda: os.truncate('/data/t', 32 << 20))\n"
                     "print(os.stat('/data/t').st_size, os.stat('/data/p').st_size)");
  INFO(r.err);
  CHECK(r.out ==
        "truncate 256M EFBIG\n"
        "pwrite at 200M EFBIG\n"
        "ftruncate 100M EFBIG\n"
        "pwrite at 1M ok\n"
        "close ok\n"
        "truncate 32M ok\n"
        "33554432 1048577\n");
  // What went up is what was allowed: no 256 MiB or 200 MiB of zeros.
  CHECK(object_sizes(s3, "budget") == json({{"p", (1 << 20) + 1}, {"t", 32 << 20}}));
  // Said in the mount's own log (rotated like the supervisor's), not the supervisor's.
  std::string dir = root.path() + "/run/sandboxes/" + id;
  CHECK(nsbox::files::read_file(dir + "/buckets/0.log").value_or("").find(
            "larger than the mount's staging budget (staging_bytes 67108864)") != std::string::npos);
  CHECK(nsbox::files::read_file(dir + "/supervisor.log").value_or("").find("staging budget") == std::string::npos);
  CHECK(root.nsbox({"rm", id}).exit_code == 0);
}

TEST_CASE("a mount's files being written share its budget: past it a writer gets EDQUOT, and room comes back at a close", "[s3]") {
  NSBOX_NEEDS(node_peers());
  NSBOX_NEEDS(fuse_device());
  S3rverPeer s3({"shared"});
  TestRoot root;
  // The manifest's spelling of the same budget.
  std::string manifest = root.path() + "/m.json";
  REQUIRE(nsbox::files::atomic_write(manifest, R"([{"type": "s3", "bucket": "shared", "mount_path": "/data", "read_only": false,
                                                   "staging_bytes": "64M"}])"));
  auto id = create_with(root, s3, {"--manifest", manifest});
  // Real bytes this time: what the staging disk holds for the mount stays under 64 MiB.
  auto r = python_in(root, id,
                     "MiB = b'x' * (1 << 20)\n"
                     "a = os.open('/data/a', os.O_WRONLY | os.O_CREAT)\n"
                     "attempt('a 40M', lambda: [os.write(a, MiB) for _ in range(40)])\n"
                     "b = os.open('/data/b', os.O_WRONLY | os.O_CREAT)\n"
                     "n = 0\n"
                     "try:\n"
                     "    for _ in range(30):\n"
                     "        os.write(b, MiB)\n"
                     "        n += 1\n"
                     "    print('b', n, 'ok')\n"
                     "except OSError as e:\n"
                     "    print('b', n, errno.errorcode[e.errno])\n"
                     "attempt('close a', lambda: os.close(a))\n"
                     // a's staging file goes when the kernel releases it, just after close()
                     // returns: until then (a bound on a hang, not a delay) b waits for room.
                     "def one_more():\n"
                     "    import time\n"
                     "    for _ in range(100):\n"
                     "        try:\n"
                     "            return os.write(b, MiB)\n"
                     "        except OSError as e:\n"
                     "            if e.errno != errno.EDQUOT:\n"
                     "                raise\n"
                     "            time.sleep(0.1)\n"
                     "    os.write(b, MiB)\n"
                     "attempt('b one more', one_more)\n"
                     "attempt('close b', lambda: os.close(b))\n"
                     "def big():\n"
                     "    with open('/data/big', 'wb') as f:\n"
                     "        f.write(b'y' * (65 << 20))\n"
                     "attempt('big', big)");
  INFO(r.err);
  CHECK(r.out ==
        "a 40M ok\n"
        "b 24 EDQUOT\n"  // 40 + 24 MiB: the budget
        "close a ok\n"
        "b one more ok\n"
        "close b ok\n"
        "big EFBIG\n");  // larger than the whole budget
  auto sizes = object_sizes(s3, "shared");
  CHECK(sizes["a"] == 40 << 20);
  CHECK(sizes["b"] == 25 << 20);
  CHECK(root.logs(id).find("the mount's files being written hold its staging budget") != std::string::npos);
  CHECK(root.nsbox({"rm", id}).exit_code == 0);
}

TEST_CASE("a mount that names no budget has 10 GiB: a truncate to 11 GiB is EFBIG and uploads nothing", "[s3]") {
  NSBOX_NEEDS(node_peers());
  NSBOX_NEEDS(fuse_device());
  S3rverPeer s3({"default"});
  TestRoot root;
  auto id = create_with(root, s3, {"--mount", "s3://default:/data:rw"});
  auto info = TestRoot::json(root.nsbox({"inspect", "--json", id}));
  CHECK(info["mounts"][0]["staging_bytes"] == 10ull << 30);
  auto r = root.sh(id, "touch /data/huge && truncate -s 11G /data/huge; stat -c %s /data/huge", {}, {.timeout_s = 240});
  CHECK(r.err.find("File too large") != std::string::npos);
  CHECK(r.out == "0\n");
  CHECK(object_sizes(s3, "default") == json({{"huge", 0}}));
  CHECK(root.nsbox({"rm", id}).exit_code == 0);
}

namespace {

const std::string kAccount(AzuritePeer::account());
const std::string kKey(AzuritePeer::account_key());

// The container, made with a request signed with the account's key (the filesystem
// under test has no call for it).
void create_container(const AzuritePeer& peer, const std::string& name) {
  using namespace nsbox::bucket;
  std::string path = "/" + kAccount + "/" + name;
  std::vector<std::pair<std::string, std::string>> query = {{"restype", "container"}};
  Headers headers = shared_key_sign({"PUT", kAccount, path, query, {}}, *base64_decode(kKey), std::time(nullptr));
  nsbox::http::Client http;
  auto response = http.perform({.method = "PUT", .url = peer.endpoint() + path + "?restype=container", .headers = headers});
  REQUIRE(response);
  INFO(response->body);
  REQUIRE(response->status == 201);
}

// `size` bytes of `fill` as blob `key`, through the client the mount's server uses.
void put_blob(nsbox::bucket::BucketClient& client, const std::string& key, size_t size, char fill) {
  nsbox::UniqueFd fd(::memfd_create("budget-test", MFD_CLOEXEC));
  REQUIRE(fd.valid());
  std::string chunk(1 << 20, fill);
  for (size_t done = 0; done < size; done += chunk.size())
    REQUIRE(::write(fd.get(), chunk.data(), chunk.size()) == static_cast<ssize_t>(chunk.size()));
  auto etag = client.upload(key, fd.get(), size);
  INFO((etag ? "" : etag.error().message));
  REQUIRE(etag);
}

}  // namespace

TEST_CASE("a read of an object replaced since its open fails with ESTALE inside the sandbox, not EIO", "[azure]") {
  NSBOX_NEEDS(node_peers());
  NSBOX_NEEDS(fuse_device());
  AzuritePeer peer;
  create_container(peer, "stale");
  nsbox::bucket::BucketMount mount;
  mount.kind = nsbox::bucket::BucketKind::kAzureBlob;
  mount.bucket = "stale";
  mount.account = kAccount;
  mount.endpoint_url = peer.endpoint() + "/" + kAccount;
  nsbox::bucket::BucketCredentials key;
  key.azure_key = kKey;
  auto client = nsbox::bucket::make_azure_client(mount, key);
  put_blob(*client, "big.bin", 64 << 20, '1');

  TestRoot root;
  auto created = root.nsbox({"create", "--mount", "azblob://" + kAccount + "/stale:/data"},
                            {.extra_env = {"AZURE_STORAGE_KEY=" + kKey, "AZURE_STORAGE_BLOB_ENDPOINT=" + peer.endpoint() + "/" + kAccount}});
  INFO(created.err);
  REQUIRE(created.exit_code == 0);
  std::string id = created.out.substr(0, created.out.find('\n'));
  // The reader says when it has read its first 4 KiB, then waits for a line on stdin
  // before it reads at 60 MiB, far past what the server fetched ahead (windows up to
  // 31 MiB, or 47 MiB should the kernel read ahead past the first): the blob is replaced
  // in between. What was fetched ahead is the old version's, and served as such.
  auto reader = root.start({"sh", id, "--",
                            "python3 -c \"import sys\nf = open('/data/big.bin', 'rb', buffering=0)\nf.read(4096)\n"
                            "print('read the start', flush=True)\nsys.stdin.readline()\nf.seek(60 << 20)\ntry:\n  f.read(4096)\n"
                            "  print('read on')\nexcept OSError as e:\n  print('errno', e.errno)\""},
                           {.stdin_is_null = false, .timeout_s = 150});
  REQUIRE(reader->wait_for_output("read the start"));
  put_blob(*client, "big.bin", 64 << 20, '2');
  reader->write_stdin("go on\n");
  auto r = reader->wait();
  INFO(r.err << "\nhost logs:\n" << root.logs(id) << "\nazurite:\n" << peer.log());
  CHECK_FALSE(r.timed_out);
  CHECK(r.out == "read the start\nerrno 116\n");  // ESTALE: "Stale file handle"
  CHECK(root.logs(id).find("412") != std::string::npos);  // the log says why
  CHECK(root.nsbox({"rm", id}).exit_code == 0);
}

