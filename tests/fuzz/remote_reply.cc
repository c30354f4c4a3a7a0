// The XML an object store answers with (listings, errors, multipart results), as
// parse_xml reads it into a tree, and the error message remote_error_from_reply makes of
// an error document; and the headers a HEAD is read from. The input is the document, and
// its first line the headers' values; a remote controls all of it.
//
// Checks: the tree can be walked whatever it holds; an error message never carries a
// secret of the mount's credentials, even when the remote echoes them back.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "mounts/bucket/remote_reply.h"
#include "mounts/bucket/sigv4.h"
#include "mounts/bucket/xml_tree.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using nsbox::bucket::XmlElement;

// Letters that "[redacted]" does not have, so a replacement cannot make a secret anew.
const nsbox::bucket::BucketCredentials kSecrets{"AKIDFUZZ", "SECRET7KEY", "SESSION9TOKEN", "QVpVUkVLRVk=", "SV=2025&SIG=XYZ"};

// Iterative: a deep document must not overflow this check's stack before the parser's.
size_t walk(const XmlElement& root) {
  size_t n = 0;
  std::vector<const XmlElement*> todo = {&root};
  while (!todo.empty()) {
    const XmlElement& e = *todo.back();
    todo.pop_back();
    ++n;
    (void)e.attribute("Encoded");
    for (const auto& c : e.children) {
      FUZZ_CHECK(e.child(c.name) != nullptr);
      FUZZ_CHECK(!e.all(c.name).empty());
      (void)e.child_text(c.name);
      (void)nsbox::bucket::parse_iso8601(c.text);
      (void)nsbox::http::parse_date(c.text);
      (void)nsbox::bucket::uri_decode(c.text, n % 2 == 0);
      todo.push_back(&c);
    }
  }
  return n;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view document(reinterpret_cast<const char*>(data), size);
  auto tree = nsbox::bucket::parse_xml(document);
  if (tree) FUZZ_CHECK(walk(*tree) >= 1);

  nsbox::http::Response response;
  response.status = size % 2 ? 403 : 500;
  response.body = std::string(document);
  response.headers = {{"x-ms-error-code", std::string(document.substr(0, 64))}};
  nsbox::Error e = nsbox::bucket::remote_error_from_reply("list s3://bucket/", response, kSecrets);
  for (const auto& secret : kSecrets.secrets()) FUZZ_CHECK(e.message.find(secret) == std::string::npos);
  FUZZ_CHECK(e.sys_errno != 0);

  std::string_view line = document.substr(0, document.find('\n'));
  response.status = 200;
  response.headers = {{"content-length", std::string(line)}, {"last-modified", std::string(line)},
                      {"etag", std::string(line)}};
  auto head = nsbox::bucket::object_head(response);
  FUZZ_CHECK(head && head->has_value() && (*head)->etag == line);
  return 0;
}
