#include "runtime/supervisor/kernel_messages.h"

namespace nsbox::kernel_messages {
namespace {

using protocol::Json;

// The longest prefix of `s` of at most `limit` bytes that does not end inside a UTF-8
// sequence (JSON strings from the kernel are valid UTF-8; a cut must keep them so).
std::string cut_utf8(const std::string& s, size_t limit) {
  if (s.size() <= limit) return s;
  size_t end = limit;
  while (end > 0 && (static_cast<unsigned char>(s[end]) & 0xC0) == 0x80) --end;
  return s.substr(0, end);
}

bool is_count(const Json& j) { return j.is_number_integer() && j.get<int64_t>() >= 0; }

std::optional<Json> checked_error(const Json& e) {
  if (!e.is_object()) return std::nullopt;
  Json out = Json::object();
  for (const char* key : {"ename", "evalue", "traceback"}) {
    auto it = e.find(key);
    if (it == e.end() || !it->is_string()) return std::nullopt;
    out[key] = cut_utf8(it->get<std::string>(), kMaxErrorText);
  }
  return out;
}

std::optional<Json> checked_display_item(const Json& item) {
  if (!item.is_object()) return std::nullopt;
  auto type = item.find("type");
  auto path = item.find("path");
  if (type == item.end() || !type->is_string() || path == item.end() || !path->is_string()) return std::nullopt;
  const std::string& p = path->get_ref<const std::string&>();
  if (!p.starts_with("/mnt/files/") || p.size() > 4096) return std::nullopt;
  Json out = {{"type", cut_utf8(type->get<std::string>(), 128)}, {"path", p}};
  for (const char* key : {"width", "height"})
    if (auto it = item.find(key); it != item.end() && is_count(*it)) out[key] = it->get<uint64_t>();
  return out;
}

}  // namespace

std::string take_result(const Json& from, Json& into, size_t results_limit) {
  std::string wrong;
  auto note = [&](const std::string& what) { wrong += (wrong.empty() ? "" : "; ") + what; };

  std::string status = "error";
  if (auto it = from.find("status"); it != from.end() && it->is_string() &&
      (*it == "ok" || *it == "error" || *it == "interrupted"))
    status = it->get<std::string>();
  else
    note("status missing or not ok/error/interrupted");
  into["status"] = status;

  if (auto it = from.find("results"); it != from.end() && !it->is_null()) {
    if (!it->is_string()) {
      note("results not a string");
    } else {
      const std::string& text = it->get_ref<const std::string&>();
      if (text.size() > results_limit) note("results longer than the limit of " + std::to_string(results_limit) + " bytes");
      into["results"] = cut_utf8(text, results_limit);
    }
  }
  if (auto it = from.find("results_file_path"); it != from.end()) {
    if (it->is_string() && it->get_ref<const std::string&>().starts_with("/mnt/files/") && it->get_ref<const std::string&>().size() <= 4096)
      into["results_file_path"] = *it;
    else
      note("results_file_path not a path under /mnt/files");
  }
  if (auto it = from.find("error"); it != from.end() && !it->is_null()) {
    if (auto e = checked_error(*it)) into["error"] = std::move(*e);
    else note("error not an object of strings ename, evalue, traceback");
  }
  if (auto it = from.find("display"); it != from.end()) {
    Json items = Json::array();
    if (!it->is_array()) {
      note("display not a list");
    } else {
      for (const auto& item : *it) {
        if (items.size() == kMaxDisplayItems) {
          note("more than " + std::to_string(kMaxDisplayItems) + " display items");
          break;
        }
        if (auto checked = checked_display_item(item)) items.push_back(std::move(*checked));
        else note("a display item without a type and a path under /mnt/files");
      }
    }
    into["display"] = std::move(items);
  }
  if (auto it = from.find("execution_count"); it != from.end() && !it->is_null()) {
    if (is_count(*it)) into["execution_count"] = it->get<uint64_t>();
    else note("execution_count not a count");
  }
  return wrong;
}

std::optional<Json> take_progress(const Json& from) {
  auto step = from.find("current_step");
  if (step == from.end() || !step->is_string()) return std::nullopt;
  Json out = {{"current_step", cut_utf8(step->get<std::string>(), kMaxProgressText)}, {"current_step_metric", nullptr}};
  if (auto metric = from.find("current_step_metric"); metric != from.end()) {
    if (metric->is_string()) out["current_step_metric"] = cut_utf8(metric->get<std::string>(), kMaxProgressText);
    else if (metric->is_number() || metric->is_null()) out["current_step_metric"] = *metric;
    else return std::nullopt;
  }
  return out;
}

}  // namespace nsbox::kernel_messages
