#include "api/access.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "isolation/sys/files.h"
#include "isolation/sys/unique_fd.h"

namespace nsbox::api {
namespace {

std::string random_bytes(size_t n) {
  std::string out(n, '\0');
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::getrandom(out.data() + got, n - got, 0);
    if (r > 0) got += static_cast<size_t>(r);
  }
  return out;
}

std::string first_line(std::string text) {
  auto end = text.find_first_of("\r\n");
  if (end != std::string::npos) text.resize(end);
  return text;
}

}  // namespace

std::string base64url(std::string_view bytes) {
  static const char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::string out;
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    uint32_t v = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8) | uint8_t(bytes[i + 2]);
    out += {kAlphabet[v >> 18], kAlphabet[(v >> 12) & 63], kAlphabet[(v >> 6) & 63], kAlphabet[v & 63]};
  }
  if (i + 1 == bytes.size()) {
    uint32_t v = uint8_t(bytes[i]) << 16;
    out += {kAlphabet[v >> 18], kAlphabet[(v >> 12) & 63]};
  } else if (i + 2 == bytes.size()) {
    uint32_t v = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8);
    out += {kAlphabet[v >> 18], kAlphabet[(v >> 12) & 63], kAlphabet[(v >> 6) & 63]};
  }
  return out;
}

std::string random_token() { return base64url(random_bytes(32)); }
std::string random_key() { return base64url(random_bytes(32)); }

Result<std::string> load_or_make_secret(const std::string& path, std::string (*make)()) {
  for (int attempt = 0; attempt < 3; ++attempt) {
    if (files::exists(path)) {
      struct stat st{};
      if (::stat(path.c_str(), &st) == 0 && (st.st_mode & 077) != 0)
        return fail(make_error(ErrorCode::kPermissionDenied, path + " is readable by others (mode " +
                                                                  std::to_string(st.st_mode & 0777) + ")",
                               "chmod 600 " + path));
      std::string secret = first_line(NSBOX_TRY(files::read_file(path, 4096)));
      if (secret.size() < 16) return fail(make_error(ErrorCode::kInvalidArgument, path + " holds no secret (too short)"));
      return secret;
    }
    // Written whole under a temporary name, then linked: a concurrent start either wins
    // the link or reads the winner's file.
    std::string temp = path + ".tmp." + std::to_string(::getpid());
    std::string secret = make();
    {
      UniqueFd fd(::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600));
      if (!fd) return fail(sys_error("create " + temp));
      NSBOX_CHECK(files::write_all(fd.get(), secret + "\n", temp));
      if (::fsync(fd.get()) != 0) return fail(sys_error("fsync " + temp));
    }
    int linked = ::link(temp.c_str(), path.c_str());
    int err = errno;
    ::unlink(temp.c_str());
    if (linked == 0) return secret;
    if (err != EEXIST) return fail(sys_error("create " + path, err));
  }
  return fail(make_error(ErrorCode::kBusy, "could not read or create " + path));
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < b.size(); ++i) diff |= static_cast<unsigned char>(i < a.size() ? a[i] ^ b[i] : 1);
  return diff == 0;
}

bool BearerToken::accepts(std::string_view header) const {
  constexpr std::string_view kScheme = "Bearer ";
  if (header.size() < kScheme.size()) return false;
  // The scheme is case-insensitive (RFC 7235); the token is not.
  for (size_t i = 0; i < kScheme.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(header[i])) != std::tolower(static_cast<unsigned char>(kScheme[i])))
      return false;
  return constant_time_equal(header.substr(kScheme.size()), token_);
}

std::string LinkSigner::sign(std::string_view sandbox_id, std::string_view path, int64_t expires) const {
  // No two links sign the same text: the id has no newline (ids and names are checked)
  // and the expiry, last, is digits only, so the path is what lies between them.
  std::string text = "nsbox-download-v1\n" + std::string(sandbox_id) + "\n" + std::string(path) + "\n" + std::to_string(expires);
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  ::HMAC(EVP_sha256(), key_.data(), static_cast<int>(key_.size()), reinterpret_cast<const unsigned char*>(text.data()),
         text.size(), mac, &len);
  return base64url(std::string_view(reinterpret_cast<const char*>(mac), len));
}

bool LinkSigner::verify(std::string_view sandbox_id, std::string_view path, int64_t expires, std::string_view signature,
                        int64_t now) const {
  bool good = constant_time_equal(signature, sign(sandbox_id, path, expires));
  return good && now < expires;
}

}  // namespace nsbox::api
