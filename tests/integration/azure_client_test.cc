// The Azure Blob client against a real Azurite, which enforces SharedKey and SAS: every
// call the bucket filesystem makes, the block path of large uploads, refused credentials,
// missing containers and a store that dies or freezes under a read.
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <set>
#include <thread>

#include "isolation/sys/files.h"
#include "isolation/sys/unique_fd.h"
#include "mounts/bucket/azure_shared_key.h"
#include "mounts/bucket/bucket_client.h"
#include "mounts/bucket/crypto.h"
#include "mounts/http/client.h"
#include "mounts/bucket/remote_reply.h"
#include "mounts/bucket/xml_tree.h"
#include "tests/support/host_features.h"
#include "tests/support/loopback_http.h"
#include "tests/support/nsbox_cli.h"
#include "tests/support/object_store_peers.h"

using namespace nsbox;
using namespace nsbox::bucket;
using nsbox::test::AzuritePeer;

namespace {

const std::string kAccount(AzuritePeer::account());
const std::string kKey(AzuritePeer::account_key());

BucketMount azure_mount(const AzuritePeer& peer, const std::string& container) {
  BucketMount m;
  m.kind = BucketKind::kAzureBlob;
  m.bucket = container;
  m.account = kAccount;
  m.endpoint_url = peer.endpoint() + "/" + kAccount;  // path style: the account is in the path
  return m;
}

BucketCredentials with_key(const std::string& key = kKey) {
  BucketCredentials c;
  c.azure_key = key;
  return c;
}

BucketCredentials with_sas(const std::string& sas) {
  BucketCredentials c;
  c.azure_sas = sas;
  return c;
}

// A request on the account signed with its key, outside the client under test: creating
// containers and looking at a blob's committed blocks.
nsbox::http::Response signed_request(const AzuritePeer& peer, const std::string& method, const std::string& path,
                            const std::vector<std::pair<std::string, std::string>>& query, Headers headers = {}) {
  std::string full_path = "/" + kAccount + path;
  SharedKeyRequest to_sign{method, kAccount, full_path, query, headers};
  Headers auth = shared_key_sign(to_sign, *base64_decode(kKey), std::time(nullptr));
  headers.insert(headers.end(), auth.begin(), auth.end());
  std::string url = peer.endpoint() + full_path;
  for (size_t i = 0; i < query.size(); ++i)
    url += (i ? "&" : "?") + uri_encode(query[i].first) + "=" + uri_encode(query[i].second);
  nsbox::http::Client http;
  auto response = http.perform({.method = method, .url = url, .headers = headers});
  REQUIRE(response);
  return *response;
}

void create_container(const AzuritePeer& peer, const std::string& name, Headers headers = {}) {
  auto r = signed_request(peer, "PUT", "/" + name, {{"restype", "container"}}, std::move(headers));
  INFO(r.body << "\nazurite's output:\n" << peer.log());
  REQUIRE(r.status == 201);
}

// A service SAS for a container, as Azure's "Create a service SAS" page builds it for
// versions 2020-12-06 and later: HMAC-SHA256 over the signed fields, keyed with the account
// key, in the query as sv, sr, sp, se and sig.
std::string container_sas(const std::string& container, const std::string& permissions) {
  std::time_t expiry_time = std::time(nullptr) + 3600;
  std::tm tm{};
  ::gmtime_r(&expiry_time, &tm);
  char expiry[32];
  std::strftime(expiry, sizeof expiry, "%Y-%m-%dT%H:%M:%SZ", &tm);
  std::string version = "2021-08-06";
  std::string string_to_sign = permissions + "\n" + "\n" + expiry + "\n" + "/blob/" + kAccount + "/" + container +
                               "\n\n\n\n" + version + "\nc\n\n\n\n\n\n\n";
  std::string sig = base64_encode(hmac_sha256(*base64_decode(kKey), string_to_sign));
  return "sv=" + version + "&sr=c&sp=" + permissions + "&se=" + uri_encode(expiry) + "&sig=" + uri_encode(sig);
}

// A staged file as the filesystem has one: `data` in an fd, read with pread from offset 0.
UniqueFd staged(const std::string& data) {
  UniqueFd fd(::memfd_create("azure-test", MFD_CLOEXEC));
  REQUIRE(fd.valid());
  for (size_t done = 0; done < data.size();) {
    ssize_t n = ::write(fd.get(), data.data() + done, data.size() - done);
    REQUIRE(n > 0);
    done += static_cast<size_t>(n);
  }
  return fd;
}

std::string upload(BucketClient& client, const std::string& key, const std::string& data) {
  UniqueFd fd = staged(data);
  auto etag = client.upload(key, fd.get(), data.size());
  INFO(key << ": " << (etag ? "" : etag.error().message));
  REQUIRE(etag);
  return *etag;
}

std::string read_all(BucketClient& client, const std::string& key, const std::string& etag, size_t size) {
  std::string out(size, '\0');
  for (size_t at = 0; at < size;) {
    auto n = client.read(key, etag, at, out.data() + at, std::min<size_t>(4 << 20, size - at));
    INFO(key << " at " << at << ": " << (n ? "" : n.error().message));
    REQUIRE(n);
    REQUIRE(*n > 0);
    at += *n;
  }
  return out;
}

std::string patterned(size_t size, uint32_t seed) {
  std::string data(size, '\0');
  uint32_t x = seed;
  for (size_t i = 0; i < size; ++i) {
    x = x * 1664525u + 1013904223u;
    data[i] = static_cast<char>(x >> 24);
  }
  return data;
}

std::set<std::string> names(const ListPage& page) {
  std::set<std::string> out;
  for (const auto& e : page.entries) out.insert(e.is_prefix ? e.name + "/" : e.name);
  return out;
}

}  // namespace

TEST_CASE("azure: puts, listings, heads, ranged reads, overwrites, copies and deletes round-trip", "[azure]") {
  NSBOX_NEEDS(nsbox::test::node_peers());
  AzuritePeer peer;
  create_container(peer, "photos");
  auto client = make_azure_client(azure_mount(peer, "photos"), with_key());
  REQUIRE(client);
  REQUIRE(client->probe(""));

  std::time_t before = std::time(nullptr);
  std::string etag_a = upload(*client, "dir/a.txt", "hello world");
  upload(*client, "dir/b.txt", "bee");
  upload(*client, "dir/sub/c.txt", "sea");
  upload(*client, "dir/", "");  // a directory marker: not an entry of its own listing
  upload(*client, "dir/odd name+&%=.txt", "odd");
  upload(*client, "top.txt", "top");

  SECTION("a delimited listing gives the files and the subdirectory, with sizes, times and etags") {
    auto page = client->list("dir/", true, "", 1000);
    INFO((page ? "" : page.error().message));
    REQUIRE(page);
    CHECK(names(*page) == std::set<std::string>{"a.txt", "b.txt", "odd name+&%=.txt", "sub/"});
    CHECK(page->next_token.empty());
    for (const auto& e : page->entries) {
      if (e.name != "a.txt") continue;
      CHECK(e.size == 11);
      CHECK(e.mtime >= before - 5);
      CHECK(e.mtime <= std::time(nullptr) + 5);
      CHECK(e.etag == etag_a);  // the listing's etag pins a read as well as the head's
    }
    auto all = client->list("", false, "", 1000);
    REQUIRE(all);
    CHECK(names(*all) == std::set<std::string>{"dir/", "dir/a.txt", "dir/b.txt", "dir/odd name+&%=.txt",
                                                "dir/sub/c.txt", "top.txt"});
  }

  SECTION("a listing pages with a small maxresults and loses nothing") {
    std::set<std::string> seen;
    std::string token;
    int pages = 0;
    do {
      auto page = client->list("dir/", true, token, 1);
      INFO((page ? "" : page.error().message));
      REQUIRE(page);
      CHECK(page->entries.size() <= 1);
      for (const auto& n : names(*page)) CHECK(seen.insert(n).second);
      token = page->next_token;
      REQUIRE(++pages < 20);
    } while (!token.empty());
    CHECK(pages >= 4);
    CHECK(seen == std::set<std::string>{"a.txt", "b.txt", "odd name+&%=.txt", "sub/"});
  }

  SECTION("head gives size, time and etag; a missing blob is no head, not an error") {
    auto head = client->head("dir/a.txt");
    REQUIRE(head);
    REQUIRE(head->has_value());
    CHECK((*head)->size == 11);
    CHECK((*head)->etag == etag_a);
    CHECK((*head)->mtime >= before - 5);
    auto missing = client->head("dir/nope");
    REQUIRE(missing);
    CHECK(!missing->has_value());
    auto odd = client->head("dir/odd name+&%=.txt");
    REQUIRE(odd);
    REQUIRE(odd->has_value());
    CHECK((*odd)->size == 3);
  }

  SECTION("ranged reads return the range, the tail at the end, nothing past it") {
    char buffer[100];
    auto n = client->read("dir/a.txt", etag_a, 6, buffer, 5);
    REQUIRE(n);
    CHECK(std::string(buffer, *n) == "world");
    n = client->read("dir/a.txt", etag_a, 8, buffer, sizeof buffer);
    REQUIRE(n);
    CHECK(std::string(buffer, *n) == "rld");
    n = client->read("dir/a.txt", etag_a, 11, buffer, sizeof buffer);
    REQUIRE(n);
    CHECK(*n == 0);
    n = client->read("dir/", "", 0, buffer, sizeof buffer);  // an empty blob
    REQUIRE(n);
    CHECK(*n == 0);
    auto missing = client->read("dir/nope", "", 0, buffer, sizeof buffer);
    REQUIRE(!missing);
    CHECK(missing.error().sys_errno == ENOENT);
  }

  SECTION("an overwrite changes the etag, and a read pinned to the old one is ESTALE") {
    std::string etag_new = upload(*client, "dir/a.txt", "HELLO WORLD, again");
    CHECK(etag_new != etag_a);
    char buffer[64];
    auto stale = client->read("dir/a.txt", etag_a, 0, buffer, sizeof buffer);
    REQUIRE(!stale);
    CHECK(stale.error().sys_errno == ESTALE);
    auto fresh = client->read("dir/a.txt", etag_new, 0, buffer, sizeof buffer);
    REQUIRE(fresh);
    CHECK(std::string(buffer, *fresh) == "HELLO WORLD, again");
  }

  SECTION("a copy has the source's bytes; delete removes it, and deleting again is fine") {
    auto copied = client->copy("dir/odd name+&%=.txt", "moved/here.txt");
    INFO((copied ? "" : copied.error().message));
    REQUIRE(copied);
    auto head = client->head("moved/here.txt");
    REQUIRE(head);
    REQUIRE(head->has_value());
    CHECK(read_all(*client, "moved/here.txt", (*head)->etag, (*head)->size) == "odd");
    REQUIRE(client->remove("moved/here.txt"));
    auto gone = client->head("moved/here.txt");
    REQUIRE(gone);
    CHECK(!gone->has_value());
    CHECK(client->remove("moved/here.txt"));
    auto missing_source = client->copy("dir/nope", "moved/x");
    REQUIRE(!missing_source);
    CHECK(missing_source.error().sys_errno == ENOENT);
  }
}

TEST_CASE("azure: a 40 MiB upload goes up as equal blocks and reads back byte for byte", "[azure]") {
  NSBOX_NEEDS(nsbox::test::node_peers());
  AzuritePeer peer;
  create_container(peer, "big");
  auto client = make_azure_client(azure_mount(peer, "big"), with_key());
  std::string data = patterned(40 << 20, 7);
  std::string etag = upload(*client, "blob.bin", data);
  CHECK(!etag.empty());

  auto head = client->head("blob.bin");
  REQUIRE(head);
  REQUIRE(head->has_value());
  CHECK((*head)->size == data.size());
  CHECK((*head)->etag == etag);
  CHECK(read_all(*client, "blob.bin", etag, data.size()) == data);

  // Committed as five 8 MiB blocks, not one Put Blob.
  auto r = signed_request(peer, "GET", "/big/blob.bin", {{"comp", "blocklist"}, {"blocklisttype", "committed"}});
  REQUIRE(r.status == 200);
  auto doc = parse_xml(r.body);
  REQUIRE(doc);
  const XmlElement* committed = doc->child("CommittedBlocks");
  REQUIRE(committed);
  auto blocks = committed->all("Block");
  CHECK(blocks.size() == 5);
  std::set<size_t> id_lengths;
  for (const auto* b : blocks) {
    CHECK(b->child_text("Size") == std::to_string(8 << 20));
    id_lengths.insert(b->child_text("Name").size());
  }
  CHECK(id_lengths.size() == 1);

  SECTION("an upload that cannot send every block leaves the blob as it was") {
    UniqueFd shrunk = staged(data.substr(0, 20 << 20));  // the staged file lost its tail
    auto failed = client->upload("blob.bin", shrunk.get(), data.size());
    REQUIRE(!failed);
    CHECK(failed.error().sys_errno == EIO);
    auto still = client->head("blob.bin");
    REQUIRE(still);
    REQUIRE(still->has_value());
    CHECK((*still)->etag == etag);
    CHECK((*still)->size == data.size());
  }
}

TEST_CASE("azure: a wrong key is EACCES, and the error shows neither the key nor a SAS", "[azure]") {
  NSBOX_NEEDS(nsbox::test::node_peers());
  AzuritePeer peer;
  create_container(peer, "private");
  std::string wrong = base64_encode(patterned(64, 99));
  auto client = make_azure_client(azure_mount(peer, "private"), with_key(wrong));
  auto probed = client->probe("");
  REQUIRE(!probed);
  CHECK(probed.error().sys_errno == EACCES);
  // Azure says AuthenticationFailed; Azurite says AuthorizationFailure, with the same message.
  CHECK_THAT(probed.error().message, Catch::Contains("HTTP 403") && Catch::Contains("failed to authenticate"));
  CHECK_THAT(probed.error().message, !Catch::Contains(wrong) && !Catch::Contains(kKey));
  UniqueFd fd = staged("x");
  auto put = client->upload("k", fd.get(), 1);
  REQUIRE(!put);
  CHECK(put.error().sys_errno == EACCES);

  // A key that is not base64 at all is refused before anything is sent.
  auto garbled = make_azure_client(azure_mount(peer, "private"), with_key("not base64!"));
  auto refused = garbled->probe("");
  REQUIRE(!refused);
  CHECK(refused.error().sys_errno == EACCES);
  CHECK_THAT(refused.error().message, !Catch::Contains("not base64!"));

  // A SAS whose signature does not match: EACCES, and the token stays out of the message.
  std::string sas = container_sas("private", "rl");
  std::string forged = sas.substr(0, sas.find("&sig=")) + "&sig=" + uri_encode(base64_encode(patterned(32, 5)));
  auto sas_client = make_azure_client(azure_mount(peer, "private"), with_sas(forged));
  char buffer[8];
  auto read = sas_client->read("k", "", 0, buffer, sizeof buffer);
  REQUIRE(!read);
  CHECK(read.error().sys_errno == EACCES);
  CHECK_THAT(read.error().message, !Catch::Contains("sig=") && !Catch::Contains(forged));
  auto listed = sas_client->probe("");
  REQUIRE(!listed);
  CHECK(listed.error().sys_errno == EACCES);
  CHECK_THAT(listed.error().message, !Catch::Contains("sig=") && !Catch::Contains(forged));
}

TEST_CASE("azure: a container SAS reads and writes without the key, and a read-only one cannot write", "[azure]") {
  NSBOX_NEEDS(nsbox::test::node_peers());
  AzuritePeer peer;
  create_container(peer, "shared");
  auto client = make_azure_client(azure_mount(peer, "shared"), with_sas(container_sas("shared", "racwdl")));
  REQUIRE(client->probe(""));
  std::string etag = upload(*client, "in/note.txt", "via sas");
  auto page = client->list("in/", true, "", 100);
  REQUIRE(page);
  CHECK(names(*page) == std::set<std::string>{"note.txt"});
  CHECK(read_all(*client, "in/note.txt", etag, 7) == "via sas");
  auto copied = client->copy("in/note.txt", "in/copy.txt");
  INFO((copied ? "" : copied.error().message));
  CHECK(copied);
  CHECK(client->remove("in/note.txt"));
  auto gone = client->head("in/note.txt");
  REQUIRE(gone);
  CHECK(!gone->has_value());

  std::string big = patterned(20 << 20, 3);  // blocks and the block list under a SAS too
  std::string big_etag = upload(*client, "in/big.bin", big);
  CHECK(read_all(*client, "in/big.bin", big_etag, big.size()) == big);

  auto reader = make_azure_client(azure_mount(peer, "shared"), with_sas(container_sas("shared", "rl")));
  CHECK(read_all(*reader, "in/copy.txt", "", 7) == "via sas");
  UniqueFd fd = staged("no");
  auto denied = reader->upload("in/denied.txt", fd.get(), 2);
  REQUIRE(!denied);
  CHECK(denied.error().sys_errno == EACCES);
}

TEST_CASE("azure: anonymous access reads a public container and cannot write it", "[azure]") {
  NSBOX_NEEDS(nsbox::test::node_peers());
  AzuritePeer peer;
  create_container(peer, "public", {{"x-ms-blob-public-access", "container"}});
  upload(*make_azure_client(azure_mount(peer, "public"), with_key()), "pub.txt", "anyone");
  auto anonymous = make_azure_client(azure_mount(peer, "public"), BucketCredentials{});
  REQUIRE(anonymous->probe(""));
  auto head = anonymous->head("pub.txt");
  REQUIRE(head);
  REQUIRE(head->has_value());
  CHECK(read_all(*anonymous, "pub.txt", (*head)->etag, (*head)->size) == "anyone");
  UniqueFd fd = staged("no");
  auto denied = anonymous->upload("pub.txt", fd.get(), 2);
  REQUIRE(!denied);
  CHECK((denied.error().sys_errno == EACCES || denied.error().sys_errno == ENOENT));
}

TEST_CASE("azure: probing a missing container is ENOENT naming it", "[azure]") {
  NSBOX_NEEDS(nsbox::test::node_peers());
  AzuritePeer peer;
  auto client = make_azure_client(azure_mount(peer, "no-such-container"), with_key());
  auto probed = client->probe("some/prefix/");
  REQUIRE(!probed);
  CHECK(probed.error().sys_errno == ENOENT);
  CHECK(probed.error().code == ErrorCode::kNotFound);
  CHECK_THAT(probed.error().message, Catch::Contains("no-such-container") && Catch::Contains("ContainerNotFound"));
}

TEST_CASE("azure: a read fails with EIO once Azurite is killed: refused, not waited for", "[azure]") {
  NSBOX_NEEDS(nsbox::test::node_peers());
  AzuritePeer peer;
  create_container(peer, "doomed");
  auto client = make_azure_client(azure_mount(peer, "doomed"), with_key());
  std::string etag = upload(*client, "k", "still here");
  char buffer[32];
  REQUIRE(client->read("k", etag, 0, buffer, sizeof buffer));  // a kept-alive connection now exists
  peer.kill_now();
  auto read = client->read("k", etag, 0, buffer, sizeof buffer);
  REQUIRE(!read);
  CHECK(read.error().sys_errno == EIO);
  CHECK_THAT(read.error().message, Catch::Contains("read azblob://devstoreaccount1/doomed/k"));
  // The dead connection was given up and the port found closed: no stall bound waited out.
  CHECK_THAT(read.error().message, Catch::Contains("Couldn't connect to server"));
}

TEST_CASE("azure: a read from a frozen Azurite fails after the stall bound, not never", "[azure]") {
  NSBOX_NEEDS(nsbox::test::node_peers());
  AzuritePeer peer;
  create_container(peer, "frozen");
  const nsbox::http::Limits limits{.connect_timeout_ms = 1000, .stall_timeout_s = 1};
  auto client = make_azure_client(azure_mount(peer, "frozen"), with_key(), limits);
  std::string etag = upload(*client, "k", "cold");
  REQUIRE(::kill(peer.pid(), SIGSTOP) == 0);
  char buffer[8];
  auto read = client->read("k", etag, 0, buffer, sizeof buffer);
  ::kill(peer.pid(), SIGCONT);  // so that the peer stops cleanly
  REQUIRE(!read);
  CHECK(read.error().sys_errno == EIO);
  // Ended by the stall bound (Azurite accepted the connection and said nothing).
  CHECK_THAT(read.error().message, Catch::Contains("no byte for 1 s"));

  // Each attempt was cut at the bound and the next one made: a silent server of the test's
  // own counts them, where a frozen Azurite cannot.
  nsbox::test::LoopbackHttpServer silent("", true);
  BucketMount counted = azure_mount(peer, "frozen");
  counted.endpoint_url = silent.url("/" + kAccount);
  auto counted_client = make_azure_client(counted, with_key(), limits);
  auto again = counted_client->read("k", etag, 0, buffer, sizeof buffer);
  REQUIRE(!again);
  CHECK(again.error().sys_errno == EIO);
  CHECK_THAT(again.error().message, Catch::Contains("no byte for 1 s"));
  for (int i = 0; i < 250 && silent.connections() < kAttempts; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(silent.connections() == kAttempts);
  for (const auto& head : silent.requests()) CHECK(head.rfind("GET /devstoreaccount1/frozen/k ", 0) == 0);
}

TEST_CASE("an Azure container mounted in a sandbox: written inside, read back by the client, the key never inside", "[azure]") {
  NSBOX_NEEDS(nsbox::test::node_peers());
  NSBOX_NEEDS(nsbox::test::fuse_device());
  AzuritePeer peer;
  create_container(peer, "agent");
  auto client = make_azure_client(azure_mount(peer, "agent"), with_key());
  upload(*client, "memories/notes.md", "from the host\n");

  nsbox::test::TestRoot root;
  std::vector<std::string> env = {"AZURE_STORAGE_KEY=" + kKey, "AZURE_STORAGE_BLOB_ENDPOINT=" + peer.endpoint() + "/" + kAccount};
  auto created = root.nsbox({"create", "--mount", "azblob://" + kAccount + "/agent/memories:/home/user/memories:rw"},
                            {.extra_env = env});
  INFO(created.err);
  REQUIRE(created.exit_code == 0);
  std::string id = created.out.substr(0, created.out.find('\n'));

  auto r = root.sh(id, "cat ~/memories/notes.md && echo '# summary' > ~/memories/memory_summary.md && mkdir ~/memories/d && ls ~/memories");
  INFO(r.err);
  CHECK(r.out == "from the host\nd\nmemory_summary.md\nnotes.md\n");
  auto head = client->head("memories/memory_summary.md");
  REQUIRE(head);
  REQUIRE(*head);
  CHECK(read_all(*client, "memories/memory_summary.md", (*head)->etag, (*head)->size) == "# summary\n");
  // An empty directory is its marker blob: still there once the listings have expired.
  auto dir = root.sh(id, "mkdir ~/memories/empty && sleep 1.5 && touch ~/memories/empty/f && ls ~/memories/empty");
  INFO(dir.err << "\nhost logs: " << root.logs(id));
  CHECK(dir.exit_code == 0);
  CHECK(dir.out == "f\n");
  CHECK(root.nsbox({"inspect", "--json", id}).out.find(kKey) == std::string::npos);
  auto environ = root.sh(id, "cat /proc/*/environ | grep -c AZURE_STORAGE; true");
  CHECK(environ.out == "0\n");
  CHECK(root.nsbox({"rm", id}).exit_code == 0);

  auto wrong = root.nsbox({"create", "--mount", "azblob://" + kAccount + "/agent:/data"},
                          {.extra_env = {"AZURE_STORAGE_KEY=" + base64_encode(std::string(64, 'x')),
                                         "AZURE_STORAGE_BLOB_ENDPOINT=" + peer.endpoint() + "/" + kAccount}});
  CHECK(wrong.exit_code != 0);
  CHECK(wrong.err.find("mount azblob://devstoreaccount1/agent/ at /data") != std::string::npos);
  CHECK(wrong.err.find("HTTP 403") != std::string::npos);
}

