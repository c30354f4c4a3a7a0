// What a cell or command printed on one stream, as its result reports it: the first
// `inline_limit` bytes inline, the byte and line counts, and — once the output is longer —
// the whole text in a file of the files volume (…/.nsbox/output/<name>), so that a cell
// printing a gigabyte costs the supervisor no memory.
#pragma once

#include <cstdint>
#include <string>

#include "isolation/sys/unique_fd.h"
#include "mounts/files_volume.h"
#include "runtime/core/command.h"
#include "runtime/protocol/frame.h"

namespace nsbox {

class OutputCapture {
 public:
  static constexpr size_t kDefaultInlineLimit = 64 << 10;
  static constexpr uint64_t kMaxFileBytes = 4ull << 30;  // past this the file stops growing
  // `volume` may be null (no place to spill: the text is only counted past the limit);
  // `dir` is relative to the volume (kOutputDir or kComposioOutputDir).
  OutputCapture(size_t inline_limit, FilesVolume* volume, std::string dir, std::string file_name)
      : limit_(inline_limit), volume_(volume), file_name_(std::move(dir) + "/" + std::move(file_name)) {}

  void append(std::string_view bytes);
  // {"stdout": ..., "stdout_lines": N, "stdout_bytes": N, "stdout_truncated": b,
  //  "stdout_file_path": "/mnt/files/<dir>/..."} for stream "stdout".
  void put(protocol::Json& result, const std::string& stream) const;

 private:
  size_t limit_;
  FilesVolume* volume_;
  std::string file_name_;
  std::string head_;
  uint64_t bytes_ = 0;
  uint64_t newlines_ = 0;
  bool ends_with_newline_ = true;
  UniqueFd file_;
  bool file_failed_ = false;
  std::string file_error_;
  uint64_t file_bytes_ = 0;
};

}  // namespace nsbox
