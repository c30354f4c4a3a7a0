// nsbox-snapstore: snapshots kept in an object-store bucket (`--snapshot-store s3://...`,
// runtime/client/snapshot_store.h), through the bucket clients the mounts use
// (mounts/bucket/bucket_client.h). A program of its own, dynamic like nsbox-bucketfs, so
// that the static nsbox and supervisor never load an HTTP stack.
//
//   stdin: {"mount": BucketMount (bucket, prefix, endpoint...), "credentials": {...}}
//   nsbox-snapstore put ID DIR   DIR/home.tar, DIR/files.tar, then DIR/snapshot.json (last:
//                                a snapshot is listed only once it is whole) under PREFIX/ID/
//   nsbox-snapstore get ID DIR MAX   the same objects into DIR (which exists and is empty);
//                                an archive larger than MAX bytes is refused before any byte
//   nsbox-snapstore ls           {"snapshots": [snapshot.json...]}: the whole ones
//   nsbox-snapstore rm ID        every object under PREFIX/ID/
//   nsbox-snapstore moved SBX SNP   PREFIX/sandboxes/SBX.json says the sandbox was drained
//                                to snapshot SNP (`put` writes the same without "moved"
//                                after each snapshot of a sandbox: its last snapshot)
//   nsbox-snapstore where SBX    that object: {"sandbox", "snapshot", "moved", "at"}
//
// Success: a JSON document on stdout. Failure: the error on stderr (never a secret), exit
// status 4 when the snapshot is not in the store, 1 otherwise.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "isolation/sys/files.h"
#include "mounts/bucket/bucket_client.h"

namespace {

using namespace nsbox;
using namespace nsbox::bucket;
using nlohmann::json;

constexpr const char* kArchives[] = {"home.tar", "files.tar"};
constexpr size_t kMaxRecord = 1 << 20;     // a snapshot.json
constexpr size_t kMaxSnapshots = 10000;    // listed at most
constexpr int kNotFound = 4;

bool valid_id(const std::string& id) {
  if (id.size() != 20 || !id.starts_with("snp-")) return false;
  for (char c : id.substr(4))
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

// A sandbox id as a key's part: sbx-, then a-z, 0-9 and '-' (a shard's and the random part).
bool valid_sandbox(const std::string& id) {
  if (id.size() > 40 || !id.starts_with("sbx-") || id.size() < 5) return false;
  for (char c : id.substr(4))
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
  return true;
}

std::string now_utc() {
  char out[32] = {};
  time_t t = ::time(nullptr);
  tm parts{};
  ::gmtime_r(&t, &parts);
  std::strftime(out, sizeof out, "%Y-%m-%dT%H:%M:%SZ", &parts);
  return out;
}

struct Store {
  BucketMount mount;
  BucketCredentials credentials;
  std::unique_ptr<BucketClient> client;

  std::string key(const std::string& id, const std::string& name) const { return mount.prefix + id + "/" + name; }
  std::string where(const std::string& id) const { return mount.source() + id; }

  // The whole object at `key`, at most `max` bytes.
  Result<std::string> read_small(const std::string& key, size_t max) {
    auto head = NSBOX_TRY(client->head(key));
    if (!head) return fail(make_error(ErrorCode::kNotFound, "no object " + key));
    if (head->size > max) return fail(make_error(ErrorCode::kLimitExceeded, key + " is larger than " + std::to_string(max) + " bytes"));
    std::string out(head->size, '\0');
    size_t got = 0;
    while (got < out.size()) {
      size_t n = NSBOX_TRY(client->read(key, head->etag, got, out.data() + got, out.size() - got));
      if (n == 0) return fail(make_error(ErrorCode::kProtocol, key + " ended early"));
      got += n;
    }
    return out;
  }

  Result<json> put(const std::string& id, const std::string& dir) {
    // The record last: until it is there, nothing lists the snapshot.
    for (const char* name : {kArchives[0], kArchives[1], "snapshot.json"}) {
      std::string path = dir + "/" + name;
      UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
      if (!fd && errno == ENOENT && std::string(name) == "files.tar") continue;
      if (!fd) return fail(sys_error("open " + path));
      struct stat st{};
      if (::fstat(fd.get(), &st) != 0) return fail(sys_error("stat " + path));
      NSBOX_CHECK_CTX(client->upload(key(id, name), fd.get(), static_cast<uint64_t>(st.st_size)), "upload " + std::string(name) + " to " + where(id));
    }
    // The sandbox's last snapshot, for a server that must answer for it once its own
    // server is gone. Best effort: the snapshot is whole without it.
    if (auto text = files::read_file(dir + "/snapshot.json", kMaxRecord)) {
      json record = json::parse(*text, nullptr, false);
      std::string sandbox = record.is_object() && record.contains("sandbox") && record["sandbox"].is_string() ? record["sandbox"].get<std::string>() : "";
      // A drain's tombstone stays the last word: a snapshot taken as it was written does
      // not make the sandbox look alive again.
      auto now = valid_sandbox(sandbox) ? where_is(sandbox) : Result<json>(json());
      bool moved = now && now->is_object() && now->value("moved", false);
      if (valid_sandbox(sandbox) && !moved)
        if (auto marked = mark(sandbox, id, false); !marked) std::fprintf(stderr, "warning: %s\n", marked.error().message.c_str());
    }
    return json{{"id", id}};
  }

  std::string pointer_key(const std::string& sandbox) const { return mount.prefix + "sandboxes/" + sandbox + ".json"; }

  Result<json> mark(const std::string& sandbox, const std::string& snapshot, bool moved) {
    json doc = {{"sandbox", sandbox}, {"snapshot", snapshot}, {"moved", moved}, {"at", now_utc()}};
    std::string text = doc.dump() + "\n";
    UniqueFd fd(::memfd_create("nsbox-pointer", MFD_CLOEXEC));
    if (!fd) return fail(sys_error("memfd_create"));
    NSBOX_CHECK(files::write_all(fd.get(), text, "memfd"));
    if (::lseek(fd.get(), 0, SEEK_SET) != 0) return fail(sys_error("lseek memfd"));
    NSBOX_CHECK_CTX(client->upload(pointer_key(sandbox), fd.get(), text.size()), "write " + mount.source() + "sandboxes/" + sandbox + ".json");
    return doc;
  }

  Result<json> where_is(const std::string& sandbox) {
    auto text = read_small(pointer_key(sandbox), 4096);
    if (!text) {
      if (text.error().code == ErrorCode::kNotFound)
        return fail(make_error(ErrorCode::kNotFound, "no snapshot of " + sandbox + " in " + mount.source()));
      return fail(std::move(text.error()));
    }
    // Whoever can write to the bucket wrote it: every field's type is checked.
    json doc = json::parse(*text, nullptr, false);
    auto is = [&](const char* key, auto check) { return doc.contains(key) && (doc[key].*check)(); };
    if (!doc.is_object() || !is("sandbox", &json::is_string) || doc["sandbox"].get<std::string>() != sandbox ||
        !is("snapshot", &json::is_string) || !valid_id(doc["snapshot"].get<std::string>()) || !is("moved", &json::is_boolean))
      return fail(make_error(ErrorCode::kProtocol, mount.source() + "sandboxes/" + sandbox + ".json is not a sandbox's pointer"));
    std::string at = is("at", &json::is_string) ? doc["at"].get<std::string>().substr(0, 40) : "";
    return json{{"sandbox", sandbox}, {"snapshot", doc["snapshot"]}, {"moved", doc["moved"].get<bool>()}, {"at", at}};
  }

  Result<json> get(const std::string& id, const std::string& dir, uint64_t max) {
    auto record = read_small(key(id, "snapshot.json"), kMaxRecord);
    if (!record) {
      if (record.error().code == ErrorCode::kNotFound)
        return fail(make_error(ErrorCode::kNotFound, "no snapshot " + id + " in " + mount.source()));
      return fail(std::move(record.error()));
    }
    NSBOX_CHECK(files::atomic_write(dir + "/snapshot.json", *record));
    for (const char* name : kArchives) {
      auto head = NSBOX_TRY(client->head(key(id, name)));
      if (!head) continue;  // files.tar: only with --include-files
      if (head->size > max)
        return fail(make_error(ErrorCode::kLimitExceeded, where(id) + "/" + name + " holds " + std::to_string(head->size) +
                                                              " bytes, more than a snapshot may (" + std::to_string(max) + ")"));
      std::string path = dir + "/" + name;
      UniqueFd out(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
      if (!out) return fail(sys_error("create " + path));
      std::vector<char> buf(8 << 20);
      for (uint64_t at = 0; at < head->size;) {
        size_t want = static_cast<size_t>(std::min<uint64_t>(buf.size(), head->size - at));
        size_t n = NSBOX_TRY(client->read(key(id, name), head->etag, at, buf.data(), want));
        if (n == 0) return fail(make_error(ErrorCode::kProtocol, key(id, name) + " ended early"));
        NSBOX_CHECK(files::write_all(out.get(), std::string_view(buf.data(), n), path));
        at += n;
      }
      if (::fsync(out.get()) != 0) return fail(sys_error("fsync " + path));
    }
    return json{{"id", id}};
  }

  Result<json> list() {
    json out = json::array();
    std::string token;
    do {
      auto page = NSBOX_TRY(client->list(mount.prefix, true, token, 1000));
      for (const auto& e : page.entries) {
        if (!e.is_prefix || !valid_id(e.name)) continue;
        if (out.size() >= kMaxSnapshots) return json{{"snapshots", out}, {"truncated", true}};
        auto record = read_small(key(e.name, "snapshot.json"), kMaxRecord);
        if (!record) continue;  // being written, or being removed
        // Whoever can write to the bucket wrote this: its fields are checked by the reader
        // (SnapshotInfo::from_json), its id here.
        json j = json::parse(*record, nullptr, false);
        if (j.is_object() && j.contains("id") && j["id"].is_string() && j["id"].get<std::string>() == e.name) out.push_back(std::move(j));
      }
      token = page.next_token;
    } while (!token.empty());
    return json{{"snapshots", out}};
  }

  Result<json> remove(const std::string& id) {
    // The record first: a removal cut short leaves no half snapshot listed.
    NSBOX_CHECK(client->remove(key(id, "snapshot.json")));
    for (const char* name : kArchives) NSBOX_CHECK(client->remove(key(id, name)));
    return json{{"removed", id}};
  }
};

int failed(const Error& e, const BucketCredentials& credentials) {
  std::fprintf(stderr, "%s\n", redact(e.message, credentials).c_str());
  if (!e.hint.empty()) std::fprintf(stderr, "hint: %s\n", e.hint.c_str());
  return e.code == ErrorCode::kNotFound ? kNotFound : 1;
}

}  // namespace

int main(int argc, char** argv) {
  // No core dump or ptrace of a process holding keys; nothing left running without nsbox.
  ::prctl(PR_SET_DUMPABLE, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  ::signal(SIGPIPE, SIG_IGN);
  std::string input(std::istreambuf_iterator<char>(std::cin), {});
  json config = json::parse(input, nullptr, false);
  if (!config.is_object() || !config.contains("mount"))
    return failed(make_error(ErrorCode::kProtocol, "nsbox-snapstore: stdin is not its configuration"), {});
  Store store;
  auto mount = BucketMount::from_json(config["mount"]);
  if (!mount) return failed(mount.error(), {});
  store.mount = std::move(*mount);
  store.credentials = BucketCredentials::from_json(config.value("credentials", json::object()));
  store.client = make_client(store.mount, store.credentials);
  if (!store.client) return failed(make_error(ErrorCode::kUnsupported, "no client for " + store.mount.source()), store.credentials);
  std::vector<std::string> args(argv + 1, argv + argc);
  std::string mode = args.empty() ? "" : args[0];
  bool takes_id = mode == "put" || mode == "get" || mode == "rm";
  if (takes_id && (args.size() < 2 || !valid_id(args[1])))
    return failed(make_error(ErrorCode::kInvalidArgument, "nsbox-snapstore " + mode + ": a snapshot id (snp-...) is needed"), {});
  Result<json> done = fail(make_error(ErrorCode::kInvalidArgument, "usage: nsbox-snapstore put|get|ls|rm|moved|where ..."));
  if (mode == "put" && args.size() == 3) done = store.put(args[1], args[2]);
  else if (mode == "get" && args.size() == 4) done = store.get(args[1], args[2], std::strtoull(args[3].c_str(), nullptr, 10));
  else if (mode == "ls" && args.size() == 1) done = store.list();
  else if (mode == "rm" && args.size() == 2) done = store.remove(args[1]);
  else if (mode == "moved" && args.size() == 3 && valid_sandbox(args[1]) && valid_id(args[2])) done = store.mark(args[1], args[2], true);
  else if (mode == "where" && args.size() == 2 && valid_sandbox(args[1])) done = store.where_is(args[1]);
  int code = done ? 0 : failed(done.error(), store.credentials);
  if (done) std::printf("%s\n", done->dump(-1, ' ', false, json::error_handler_t::replace).c_str());
  store.credentials.wipe();
  return code;
}
