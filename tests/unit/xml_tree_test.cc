// The remote's XML replies (mounts/bucket/xml_tree.h).
#include <catch2/catch.hpp>
#include <string>

#include "mounts/bucket/xml_tree.h"

using nsbox::bucket::parse_xml;

namespace {

std::string nested(size_t depth) {
  std::string doc;
  for (size_t i = 0; i < depth; ++i) doc += "<a>";
  for (size_t i = 0; i < depth; ++i) doc += "</a>";
  return doc;
}

}  // namespace

// ~XmlElement recursed once per level: 1,000,000 levels (7 MB, under the body limit)
// overflowed the bucket server's stack (the fuzz target remote_reply found it; tests/fuzz/
// corpus/remote_reply/deep-nesting.xml).
TEST_CASE("an XML reply nested deeper than 64 elements is refused, saying so, and one of 64 is parsed") {
  auto deep = parse_xml(nested(1'000'000));
  REQUIRE(!deep);
  CHECK(deep.error().message.find("deeper than 64") != std::string::npos);
  auto at_limit = parse_xml(nested(64));
  REQUIRE(at_limit);
  CHECK(at_limit->name == "a");
  CHECK(!parse_xml(nested(65)));
}
