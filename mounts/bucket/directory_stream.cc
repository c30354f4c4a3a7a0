#include "mounts/bucket/directory_stream.h"

#include <algorithm>

namespace nsbox::bucket {
namespace {

std::atomic<uint64_t> g_remembered{0};  // entries kept for the lookup cache, all streams

bool try_reserve(uint64_t n) {
  uint64_t used = g_remembered.load();
  while (used + n <= DirectoryStream::kRememberBudget)
    if (g_remembered.compare_exchange_weak(used, used + n)) return true;
  return false;
}

// Where the remote lists an entry: a common prefix "a" is the key "a/".
std::string key_order(const ObjectEntry& e) { return e.is_prefix ? e.name + "/" : e.name; }

// Names a directory entry can have (a key "x//y" or "../y" cannot be listed as one). A
// remote that ignores the delimiter lists "dir/a/b" as the entry "a/b", and a url-encoded
// key can decode to a NUL: the kernel refuses a whole readdir reply holding a '/', and
// libfuse cuts a name at the NUL.
bool listable(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.size() <= 255 && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

}  // namespace

DirectoryStream::DirectoryStream(BucketClient& client, std::string listing_prefix, std::vector<ObjectEntry> local)
    : client_(client), prefix_(std::move(listing_prefix)), local_(std::move(local)) {
  for (const auto& e : local_) local_names_.insert(e.name);
}

DirectoryStream::~DirectoryStream() { forget_all(); }

uint64_t DirectoryStream::remembered_in_use() { return g_remembered.load(); }

Result<const ObjectEntry*> DirectoryStream::at(uint64_t index) {
  if (index < local_.size()) return &local_[index];
  uint64_t i = index - local_.size();
  if (!started_ || i < base_) restart();
  while (i >= base_ + page_.size()) {
    if (ended_) return nullptr;
    NSBOX_CHECK(fetch_next_page());
  }
  return &page_[i - base_];
}

bool DirectoryStream::needs_request(uint64_t index) const {
  if (index < local_.size()) return false;
  uint64_t i = index - local_.size();
  return !started_ || i < base_ || (i >= base_ + page_.size() && !ended_);
}

bool DirectoryStream::settled(uint64_t index) const {
  if (index < local_.size()) return true;
  const ObjectEntry& e = page_[index - local_.size() - base_];
  return e.is_prefix || (!files_before_prefix_.contains(e.name) && !page_directories_over_files_.contains(e.name));
}

std::optional<DirectoryStream::Whole> DirectoryStream::take_whole() {
  if (!started_ || !ended_ || !remembering_) return std::nullopt;
  Whole whole{std::move(whole_), started_at_};
  for (const auto& e : local_) whole.entries.try_emplace(e.name, e);
  forget_all();
  remembering_ = false;
  return whole;
}

void DirectoryStream::restart() {
  page_.clear();
  base_ = 0;
  token_.clear();
  started_ = true;
  started_at_ = std::chrono::steady_clock::now();
  ended_ = false;
  files_before_prefix_.clear();
  page_directories_over_files_.clear();
  forget_all();
  remembering_ = true;
}

Result<void> DirectoryStream::fetch_next_page() {
  auto page = NSBOX_TRY(client_.list(prefix_, true, token_, kPage));
  // A page has its keys, then its common prefixes: in key order, they interleave.
  std::vector<ObjectEntry> listed = std::move(page.entries);
  std::sort(listed.begin(), listed.end(), [](const auto& a, const auto& b) { return key_order(a) < key_order(b); });
  base_ += page_.size();
  page_.clear();
  page_directories_over_files_.clear();
  std::vector<ObjectEntry> directories_over_files;
  for (auto& e : listed) {
    std::string at = key_order(e);
    std::erase_if(files_before_prefix_, [&](const std::string& file) { return file + "/" < at; });
    if (!listable(e.name) || local_names_.contains(e.name)) continue;
    if (e.is_prefix && files_before_prefix_.contains(e.name)) {  // listed already, as the file
      page_directories_over_files_.insert(e.name);
      directories_over_files.push_back(std::move(e));
      continue;
    }
    if (!e.is_prefix) files_before_prefix_.insert(e.name);
    page_.push_back(std::move(e));
  }
  token_ = std::move(page.next_token);
  ended_ = token_.empty();
  remember(page_, directories_over_files);
  return {};
}

void DirectoryStream::remember(const std::vector<ObjectEntry>& entries, const std::vector<ObjectEntry>& directories_over_files) {
  if (!remembering_) return;
  if (!try_reserve(entries.size())) {
    forget_all();
    remembering_ = false;
    return;
  }
  reserved_ += entries.size();
  for (const auto& e : entries) whole_.try_emplace(e.name, e);
  // A lookup of such a name finds the directory: so does the cache (no entry more).
  for (const auto& d : directories_over_files) whole_.insert_or_assign(d.name, d);
}

void DirectoryStream::forget_all() {
  whole_.clear();
  g_remembered -= reserved_;
  reserved_ = 0;
}

}  // namespace nsbox::bucket
