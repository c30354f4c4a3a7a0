// The listing of one open directory of a bucket mount, read from the remote a page at a
// time as readdir asks for it: the first entries come after one request, and an open
// directory holds one page (at most kPage entries), however many keys the directory has.
//
// Entries are numbered from 0 in the order they are listed: first the names created here
// and not uploaded yet (`local`), then the remote's, in its key order, without names
// already listed. Reading an index before the current page starts the listing over (a
// seekdir back). A name that is both a key and a common prefix ("a" and "a/...") is listed
// once, as what comes first in key order (the file), and kept for lookups as the directory
// (what a lookup finds).
//
// While the whole listing fits a budget shared by every open directory of the server
// (kRememberBudget entries), its entries are also kept by name, for the lookup cache to
// take at the end: then `ls -l` costs no request per entry. A larger listing is not kept.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "mounts/bucket/bucket_client.h"

namespace nsbox::bucket {

class DirectoryStream {
 public:
  DirectoryStream(BucketClient& client, std::string listing_prefix, std::vector<ObjectEntry> local);
  ~DirectoryStream();
  DirectoryStream(const DirectoryStream&) = delete;
  DirectoryStream& operator=(const DirectoryStream&) = delete;

  // The entry at `index`, fetching pages as needed; nullptr past the last. Valid until the
  // next call. Not thread-safe: the caller serialises the calls of one stream.
  Result<const ObjectEntry*> at(uint64_t index);
  // Whether at(index) would ask the remote (for another page, or to start over).
  bool needs_request(uint64_t index) const;
  // Whether the entry at `index`, just read by at(), is what a lookup of its name finds: a
  // file is not until the listing is past "name/" (the name may still come back as a
  // directory, which a lookup finds instead).
  bool settled(uint64_t index) const;

  // Once the listing was read to its end within the budget: every entry by name (taken;
  // later calls give nullopt), and when the reading of its first page began. A directory
  // marker is not an entry.
  struct Whole {
    std::map<std::string, ObjectEntry> entries;
    std::chrono::steady_clock::time_point since;
  };
  std::optional<Whole> take_whole();

  static constexpr int kPage = 1000;
  static constexpr uint64_t kRememberBudget = 200000;
  static uint64_t remembered_in_use();  // for tests

 private:
  void restart();
  Result<void> fetch_next_page();
  void remember(const std::vector<ObjectEntry>& entries, const std::vector<ObjectEntry>& directories_over_files);
  void forget_all();

  BucketClient& client_;
  std::string prefix_;
  std::vector<ObjectEntry> local_;
  std::set<std::string> local_names_;
  std::vector<ObjectEntry> page_;  // the remote's entries [base_, base_ + page_.size())
  uint64_t base_ = 0;
  std::string token_;  // for the page after page_
  bool started_ = false;
  bool ended_ = false;
  // Files listed whose name may still come back as a common prefix ("a" before "a/", with
  // keys such as "a-b" between): dropped once the listing is past "name/".
  std::set<std::string> files_before_prefix_;
  std::set<std::string> page_directories_over_files_;  // names of page_ that are directories too
  std::map<std::string, ObjectEntry> whole_;
  std::chrono::steady_clock::time_point started_at_;
  bool remembering_ = true;  // whole_ holds every remote entry so far
  uint64_t reserved_ = 0;    // whole_'s share of kRememberBudget
};

}  // namespace nsbox::bucket
