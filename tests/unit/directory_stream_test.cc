// The listing of an open bucket directory, page by page: every name once, the local ones
// first, a file and a directory of one name once, a rewind that starts over, and the
// whole listing kept for lookups only while it fits the shared budget. The store is an
// in-memory stand-in that pages its keys like ListObjectsV2 (keys, then common prefixes,
// per page); the real clients are tested against s3rver and Azurite.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "mounts/bucket/directory_stream.h"

using namespace nsbox;
using namespace nsbox::bucket;

namespace {

// A directory's listing: `keys` are names below it ("x" a file, "d/" a common prefix),
// served in key order, `page` of them a page.
class PagedBucket final : public BucketClient {
 public:
  PagedBucket(std::vector<std::string> keys, size_t page) : keys_(std::move(keys)), page_(page) {
    std::sort(keys_.begin(), keys_.end());
  }
  int lists = 0;

  Result<ListPage> list(const std::string&, bool, const std::string& token, int max_keys) override {
    ++lists;
    size_t from = token.empty() ? 0 : std::stoul(token);
    size_t to = std::min({keys_.size(), from + page_, from + static_cast<size_t>(max_keys)});
    ListPage page;
    std::vector<ObjectEntry> prefixes;
    for (size_t i = from; i < to; ++i) {
      const std::string& k = keys_[i];
      bool is_prefix = k.back() == '/';
      ObjectEntry e{is_prefix ? k.substr(0, k.size() - 1) : k, is_prefix, is_prefix ? 0 : k.size(), 0, ""};
      (is_prefix ? prefixes : page.entries).push_back(e);
    }
    page.entries.insert(page.entries.end(), prefixes.begin(), prefixes.end());  // keys first, as S3 sends them
    if (to < keys_.size()) page.next_token = std::to_string(to);
    return page;
  }
  Result<std::optional<ObjectHead>> head(const std::string&) override { return std::optional<ObjectHead>(); }
  Result<size_t> read(const std::string&, const std::string&, uint64_t, char*, size_t) override { return size_t{0}; }
  Result<std::string> upload(const std::string&, int, uint64_t) override { return std::string(); }
  Result<void> remove(const std::string&) override { return {}; }
  Result<void> copy(const std::string&, const std::string&) override { return {}; }
  Result<void> probe(const std::string&) override { return {}; }
  void stop() override {}

 private:
  std::vector<std::string> keys_;
  size_t page_;
};

struct Listed {
  std::vector<std::string> names;  // "d/" for a directory
};

Listed read_all(DirectoryStream& stream, uint64_t from = 0) {
  Listed out;
  for (uint64_t i = from;; ++i) {
    auto e = stream.at(i);
    REQUIRE(e);
    if (!*e) break;
    out.names.push_back((*e)->name + ((*e)->is_prefix ? "/" : ""));
  }
  return out;
}

std::vector<std::string> numbered(const std::string& stem, int n) {
  std::vector<std::string> keys;
  for (int i = 0; i < n; ++i) keys.push_back(stem + std::to_string(10000 + i));
  return keys;
}

}  // namespace

TEST_CASE("a directory streams page by page, every name once, the local ones first") {
  auto keys = numbered("f", 2500);
  keys.push_back("sub/");
  keys.push_back("new.txt");  // created here, and uploaded meanwhile: listed once, as local
  PagedBucket bucket(keys, 1000);
  DirectoryStream stream(bucket, "p/", {ObjectEntry{"new.txt", false, 0, 0, ""}});
  auto first = stream.at(0);
  REQUIRE(first);
  CHECK((*first)->name == "new.txt");
  CHECK(bucket.lists == 0);  // the local entries need no request
  auto all = read_all(stream);
  CHECK(bucket.lists == 3);
  CHECK(all.names.size() == 2502);
  CHECK(std::set<std::string>(all.names.begin(), all.names.end()).size() == all.names.size());
  CHECK(std::count(all.names.begin(), all.names.end(), "sub/") == 1);
  // Reading on within the last page costs nothing; going back starts over.
  REQUIRE(stream.at(2400));
  CHECK(bucket.lists == 3);
  CHECK_FALSE(stream.needs_request(2450));
  CHECK_FALSE(stream.needs_request(9999));  // past the end, which is known
  CHECK(stream.needs_request(5));
  auto again = read_all(stream);
  CHECK(again.names == all.names);
  CHECK(bucket.lists == 6);
}

TEST_CASE("a key and a common prefix of one name are listed once, on one page or across two") {
  // "a" < "a-1" < "a.b" < "a/" in key order: the file and the directory "a" are apart.
  std::vector<std::string> keys = {"a", "a-1", "a.b", "a/", "b", "b/", "c/"};
  for (size_t page : {size_t{100}, size_t{1}, size_t{2}, size_t{3}}) {
    INFO("page of " << page);
    PagedBucket bucket(keys, page);
    DirectoryStream stream(bucket, "", {});
    auto all = read_all(stream);
    CHECK(all.names == std::vector<std::string>{"a", "a-1", "a.b", "b", "c/"});
    // For lookups (which find the directory), the directory.
    auto whole = stream.take_whole();
    REQUIRE(whole);
    CHECK(whole->entries.size() == 5);
    CHECK(whole->entries.at("a").is_prefix);
    CHECK(whole->entries.at("b").is_prefix);
    CHECK_FALSE(whole->entries.at("a-1").is_prefix);
  }
}

TEST_CASE("an entry is settled (its attributes may go with it) only once it cannot come back as a directory") {
  // What a lookup of each name finds, as read: "a" and "b" are directories too; "c" and
  // "a-1" are files (the listing passed "c/" at "d", and "a-1/" at "a.b").
  std::vector<std::string> keys = {"a", "a-1", "a.b", "a/", "b", "b/", "c", "d"};
  for (size_t page : {size_t{100}, size_t{1}, size_t{2}, size_t{3}}) {
    INFO("page of " << page);
    PagedBucket bucket(keys, page);
    DirectoryStream stream(bucket, "", {ObjectEntry{"new", false, 0, 0, ""}});
    std::vector<std::string> settled_files;
    for (uint64_t i = 0;; ++i) {
      auto e = stream.at(i);
      REQUIRE(e);
      if (!*e) break;
      if (stream.settled(i) && !(*e)->is_prefix) settled_files.push_back((*e)->name);
    }
    // "a" and "b" never go as files; the last file of a page may not yet be known to be one.
    CHECK(std::count(settled_files.begin(), settled_files.end(), "a") == 0);
    CHECK(std::count(settled_files.begin(), settled_files.end(), "b") == 0);
    CHECK(settled_files.front() == "new");  // made here: the table knows it
    if (page == 100) CHECK(settled_files == std::vector<std::string>{"new", "a-1", "a.b", "c"});
  }
}

TEST_CASE("a whole listing is kept for lookups within the budget, and given back") {
  SECTION("a small one") {
    PagedBucket bucket({"x", "y/"}, 1000);
    DirectoryStream stream(bucket, "", {ObjectEntry{"local", false, 0, 0, ""}});
    CHECK_FALSE(stream.take_whole());  // not read yet
    read_all(stream);
    CHECK(DirectoryStream::remembered_in_use() == 2);
    auto whole = stream.take_whole();
    REQUIRE(whole);
    CHECK(whole->entries.size() == 3);
    CHECK(whole->entries.at("y").is_prefix);
    CHECK(whole->entries.count("local"));
    CHECK(DirectoryStream::remembered_in_use() == 0);
    CHECK_FALSE(stream.take_whole());  // taken
  }
  SECTION("one larger than the budget streams all the same, and is not kept") {
    PagedBucket bucket(numbered("k", static_cast<int>(DirectoryStream::kRememberBudget) + 1500), 1000);
    {
      DirectoryStream stream(bucket, "", {});
      CHECK(read_all(stream).names.size() == DirectoryStream::kRememberBudget + 1500);
      CHECK_FALSE(stream.take_whole());
      CHECK(DirectoryStream::remembered_in_use() == 0);
    }
  }
  SECTION("an unfinished listing gives its share back when closed") {
    PagedBucket bucket(numbered("k", 3000), 1000);
    {
      DirectoryStream stream(bucket, "", {});
      REQUIRE(stream.at(1500));
      CHECK(DirectoryStream::remembered_in_use() == 2000);
    }
    CHECK(DirectoryStream::remembered_in_use() == 0);
  }
}

// A remote that ignores the delimiter lists "dir/a/b" as "a/b", and a url-encoded key can
// decode to a NUL: one such name made the kernel refuse the whole readdir reply, or
// libfuse cut it (the fuzz target bucket_listing found them). The plain names around
// them are listed.
TEST_CASE("names a directory entry cannot have are left out of a listing, a '/', a NUL, '.', '..', past 255 bytes") {
  PagedBucket bucket({"a/b", std::string("c\0d", 3), ".", "..", std::string(256, 'x'), "plain", "sub/"}, 1000);
  DirectoryStream stream(bucket, "dir/", {});
  auto all = read_all(stream);
  std::sort(all.names.begin(), all.names.end());
  CHECK(all.names == std::vector<std::string>{"plain", "sub/"});
}
