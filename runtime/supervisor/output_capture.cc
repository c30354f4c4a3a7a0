#include "runtime/supervisor/output_capture.h"

#include <algorithm>

#include "isolation/sys/files.h"

namespace nsbox {
namespace {

// The longest prefix of `s` that does not end inside a UTF-8 sequence.
std::string_view utf8_prefix(std::string_view s) {
  size_t end = s.size();
  if (end == 0) return s;
  size_t lead = end - 1;
  while (lead > 0 && end - lead < 4 && (static_cast<unsigned char>(s[lead]) & 0xC0) == 0x80) --lead;
  unsigned char c = static_cast<unsigned char>(s[lead]);
  size_t need = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
  return end - lead >= need ? s : s.substr(0, lead);
}

}  // namespace

void OutputCapture::append(std::string_view bytes) {
  if (bytes.empty()) return;
  bytes_ += bytes.size();
  newlines_ += static_cast<uint64_t>(std::count(bytes.begin(), bytes.end(), '\n'));
  ends_with_newline_ = bytes.back() == '\n';
  size_t take = head_.size() < limit_ ? std::min(bytes.size(), limit_ - head_.size()) : 0;
  head_.append(bytes.substr(0, take));
  std::string_view rest = bytes.substr(take);
  if (rest.empty() || !volume_ || file_failed_) return;
  if (!file_) {
    // First overflow: the file starts with everything so far, which is exactly head_.
    auto fd = volume_->create_file(file_name_);
    if (!fd) {
      file_failed_ = true;
      file_error_ = fd.error().message;
      return;
    }
    file_ = std::move(*fd);
    if (!files::write_all(file_.get(), head_, file_name_)) {
      file_failed_ = true;
      return;
    }
    file_bytes_ = head_.size();
  }
  if (file_bytes_ >= kMaxFileBytes) return;
  std::string_view part = rest.substr(0, std::min<uint64_t>(rest.size(), kMaxFileBytes - file_bytes_));
  if (!files::write_all(file_.get(), part, file_name_)) {
    file_failed_ = true;
    return;
  }
  file_bytes_ += part.size();
}

void OutputCapture::put(protocol::Json& result, const std::string& stream) const {
  bool truncated = bytes_ > head_.size();
  std::string_view shown = truncated ? utf8_prefix(head_) : std::string_view(head_);
  protocol::Json text;
  protocol::put_bytes(text, shown);
  if (text.contains("data")) result[stream] = text["data"];
  else result[stream + "_b64"] = text["data_b64"];
  result[stream + "_bytes"] = bytes_;
  result[stream + "_lines"] = newlines_ + (bytes_ > 0 && !ends_with_newline_ ? 1 : 0);
  result[stream + "_truncated"] = truncated;
  if (file_ && !file_failed_) result[stream + "_file_path"] = FilesVolume::inside_path(file_name_);
  if (truncated && file_failed_ && !file_error_.empty()) result[stream + "_file_error"] = file_error_;
}

}  // namespace nsbox
