// The replies of S3 and Azure Blob are small XML documents (listings, errors, multipart
// results): parsed with expat into a tree of elements, namespaces dropped.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "isolation/sys/error.h"

namespace nsbox::bucket {

struct XmlElement {
  std::string name;  // without a namespace prefix
  std::string text;  // character data directly inside, entities decoded
  std::vector<XmlElement> children;
  std::vector<std::pair<std::string, std::string>> attributes;  // names without a prefix

  std::string attribute(std::string_view attribute_name) const;  // "" when there is none

  const XmlElement* child(std::string_view child_name) const;
  std::string child_text(std::string_view child_name) const;  // "" when there is none
  std::vector<const XmlElement*> all(std::string_view child_name) const;
};

Result<XmlElement> parse_xml(std::string_view document);

}  // namespace nsbox::bucket
