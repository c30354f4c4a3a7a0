// What the kernel tells the supervisor about a cell (its "result" and "progress" frames),
// as kernel_messages checks it before any of it reaches a client. The kernel runs user
// code, and a cell can write any frame to the kernel's channel. The input is the frame's
// payload; a control word from its end is the inline limit for the result's value.
//
// Checks: whatever came in, what goes on has the types and bounds docs/protocol.md
// promises (a status among ok/error/interrupted, strings within their limits, display
// items with a type and a path under /mnt/files, at most kMaxDisplayItems of them), and
// stays valid UTF-8: it is encoded and parsed back unchanged.
#include <cstdint>
#include <string>

#include <fuzzer/FuzzedDataProvider.h>

#include "runtime/supervisor/kernel_messages.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using nsbox::protocol::Json;
namespace km = nsbox::kernel_messages;

void check_round_trip(const Json& j) {
  std::string frame = nsbox::protocol::encode(j);
  FUZZ_CHECK(nsbox::fuzz::parse_json(std::string_view(frame).substr(4)) == j || nsbox::fuzz::has_non_finite(j));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  size_t limit = in.ConsumeIntegralInRange<size_t>(0, 4096);
  Json from = nsbox::fuzz::parse_json(in.ConsumeRemainingBytesAsString());
  if (from.is_discarded()) return 0;

  Json into = Json::object();
  (void)km::take_result(from, into, limit);
  FUZZ_CHECK(into["status"] == "ok" || into["status"] == "error" || into["status"] == "interrupted");
  if (into.contains("results")) FUZZ_CHECK(into["results"].is_string() && into["results"].get<std::string>().size() <= limit);
  if (into.contains("results_file_path"))
    FUZZ_CHECK(into["results_file_path"].is_string() && into["results_file_path"].get<std::string>().starts_with("/mnt/files/"));
  if (into.contains("error"))
    for (const char* key : {"ename", "evalue", "traceback"})
      FUZZ_CHECK(into["error"][key].is_string() && into["error"][key].get<std::string>().size() <= km::kMaxErrorText);
  if (into.contains("display")) {
    FUZZ_CHECK(into["display"].is_array() && into["display"].size() <= km::kMaxDisplayItems);
    for (const auto& item : into["display"])
      FUZZ_CHECK(item["type"].is_string() && item["path"].is_string() &&
                 item["path"].get<std::string>().starts_with("/mnt/files/"));
  }
  if (into.contains("execution_count")) FUZZ_CHECK(into["execution_count"].is_number_unsigned());
  check_round_trip(into);

  if (auto progress = km::take_progress(from)) {
    FUZZ_CHECK((*progress)["current_step"].is_string());
    FUZZ_CHECK((*progress)["current_step"].get<std::string>().size() <= km::kMaxProgressText);
    const Json& metric = (*progress)["current_step_metric"];
    FUZZ_CHECK(metric.is_null() || metric.is_number() ||
               (metric.is_string() && metric.get<std::string>().size() <= km::kMaxProgressText));
    check_round_trip(*progress);
  }
  return 0;
}
