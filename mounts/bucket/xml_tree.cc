#include "mounts/bucket/xml_tree.h"

#include <expat.h>

#include <memory>

namespace nsbox::bucket {
namespace {

// S3's and Azure's replies are three or four elements deep. A remote's document could be a
// million (7 MB, under the body limit), and ~XmlElement recurses once per level: that
// overflowed the bucket server's stack (the fuzz target remote_reply found it).
constexpr size_t kMaxDepth = 64;

struct Builder {
  XML_Parser parser = nullptr;
  XmlElement root;
  std::vector<XmlElement*> open;  // the path from the document element down
  bool started = false;
  bool too_deep = false;
};

std::string local_name(const char* name) {
  std::string_view n(name);
  auto colon = n.rfind(':');
  return std::string(colon == std::string_view::npos ? n : n.substr(colon + 1));
}

// `open` points into the children vectors: safe, because a push_back only ever moves the
// closed siblings of the new element, never an element that is still open.
void on_start(void* data, const char* name, const char** attributes) {
  auto* b = static_cast<Builder*>(data);
  if (b->open.size() >= kMaxDepth) {
    b->too_deep = true;
    XML_StopParser(b->parser, XML_FALSE);
    return;
  }
  XmlElement* element = &b->root;
  if (!b->started) {
    b->started = true;
    b->root.name = local_name(name);
  } else {
    auto& parent = *b->open.back();
    parent.children.push_back({local_name(name), {}, {}, {}});
    element = &parent.children.back();
  }
  for (const char** a = attributes; a && a[0] && a[1]; a += 2) element->attributes.emplace_back(local_name(a[0]), a[1]);
  b->open.push_back(element);
}

void on_end(void* data, const char*) {
  auto* b = static_cast<Builder*>(data);
  if (!b->open.empty()) b->open.pop_back();
}

void on_text(void* data, const char* s, int len) {
  auto* b = static_cast<Builder*>(data);
  if (!b->open.empty()) b->open.back()->text.append(s, static_cast<size_t>(len));
}

}  // namespace

const XmlElement* XmlElement::child(std::string_view child_name) const {
  for (const auto& c : children)
    if (c.name == child_name) return &c;
  return nullptr;
}

std::string XmlElement::child_text(std::string_view child_name) const {
  const XmlElement* c = child(child_name);
  return c ? c->text : std::string();
}

std::string XmlElement::attribute(std::string_view attribute_name) const {
  for (const auto& [n, v] : attributes)
    if (n == attribute_name) return v;
  return {};
}

std::vector<const XmlElement*> XmlElement::all(std::string_view child_name) const {
  std::vector<const XmlElement*> found;
  for (const auto& c : children)
    if (c.name == child_name) found.push_back(&c);
  return found;
}

Result<XmlElement> parse_xml(std::string_view document) {
  // ':' as the namespace separator: expat then gives "uri:Name", and local_name drops the uri.
  std::unique_ptr<XML_ParserStruct, decltype(&XML_ParserFree)> parser(XML_ParserCreateNS(nullptr, ':'), XML_ParserFree);
  if (!parser) return fail(make_error(ErrorCode::kInternal, "XML_ParserCreate failed"));
  Builder builder;
  builder.parser = parser.get();
  XML_SetUserData(parser.get(), &builder);
  XML_SetElementHandler(parser.get(), on_start, on_end);
  XML_SetCharacterDataHandler(parser.get(), on_text);
  auto status = XML_Parse(parser.get(), document.data(), static_cast<int>(document.size()), XML_TRUE);
  if (builder.too_deep)
    return fail(make_error(ErrorCode::kProtocol, "an XML document from the remote nested deeper than " +
                                                     std::to_string(kMaxDepth) + " elements"));
  if (status == XML_STATUS_ERROR)
    return fail(make_error(ErrorCode::kProtocol, std::string("malformed XML from the remote: ") +
                                                     XML_ErrorString(XML_GetErrorCode(parser.get())) + " at line " +
                                                     std::to_string(XML_GetCurrentLineNumber(parser.get()))));
  if (!builder.started) return fail(make_error(ErrorCode::kProtocol, "an empty XML document from the remote"));
  return std::move(builder.root);
}

}  // namespace nsbox::bucket
