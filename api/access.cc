#include "api/access.h"

#include <fcntl.h>
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

bool BearerToken::accepts(std::string_view header) const {
  constexpr std::string_view kScheme = "Bearer ";
  if (header.size() < kScheme.size()) return false;
  // The scheme is case-insensitive (RFC 7235); the token is not.
  for (size_t i = 0; i < kScheme.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(header[i])) != std::tolower(static_cast<unsigned char>(kScheme[i])))
      return false;
  return constant_time_equal(header.substr(kScheme.size()), token_);
}

}  // namespace nsbox::api
