// What a cell can forge on the kernel's channel never reaches a client in a shape the
// protocol does not promise.
#include <catch2/catch.hpp>

#include "runtime/supervisor/kernel_messages.h"

using nlohmann::json;
namespace km = nsbox::kernel_messages;

TEST_CASE("a well-formed kernel result is taken as it is") {
  json from = {{"status", "ok"}, {"results", "42"}, {"results_file_path", "/mnt/files/.nsbox/output/cell-1-results.txt"},
               {"error", nullptr}, {"execution_count", 3},
               {"display", {{{"type", "image/png"}, {"path", "/mnt/files/.nsbox/output/f.png"}, {"width", 640}, {"height", 480}}}}};
  json into;
  CHECK(km::take_result(from, into, 1000) == "");
  CHECK(into["status"] == "ok");
  CHECK(into["results"] == "42");
  CHECK(into["results_file_path"] == "/mnt/files/.nsbox/output/cell-1-results.txt");
  CHECK(into["execution_count"] == 3);
  CHECK(into["display"][0]["width"] == 640);
}

TEST_CASE("a forged kernel result has every mistyped or oversized field dropped or cut") {
  json from = {{"status", "pwned"},
               {"results", 7},
               {"results_file_path", 12345},
               {"error", {{"ename", json::array()}}},
               {"execution_count", "many"},
               {"display", {7, {{"type", 1}}, {{"type", "image/png"}, {"path", "/etc/shadow"}}}}};
  json into = {{"status", "error"}, {"results", nullptr}, {"error", nullptr}, {"display", json::array()}, {"execution_count", nullptr}};
  std::string wrong = km::take_result(from, into, 1000);
  CHECK(wrong.find("status") != std::string::npos);
  CHECK(wrong.find("results_file_path") != std::string::npos);
  CHECK(into["status"] == "error");
  CHECK(into["results"].is_null());
  CHECK_FALSE(into.contains("results_file_path"));
  CHECK(into["error"].is_null());
  CHECK(into["execution_count"].is_null());
  CHECK(into["display"] == json::array());

  json many = {{"status", "ok"}, {"results", std::string(5000, 'x') + "\xc3\xa9"}, {"display", json::array()}};
  for (int i = 0; i < 10000; ++i) many["display"].push_back({{"type", "image/png"}, {"path", "/mnt/files/x.png"}});
  json cut;
  CHECK_FALSE(km::take_result(many, cut, 5001).empty());
  CHECK(cut["results"].get<std::string>().size() == 5000);  // not in the middle of the é
  CHECK(cut["display"].size() == km::kMaxDisplayItems);
}

TEST_CASE("progress events are checked and cut") {
  auto ok = km::take_progress({{"current_step", "FETCH"}, {"current_step_metric", "10/100"}});
  REQUIRE(ok);
  CHECK((*ok)["current_step_metric"] == "10/100");
  CHECK_FALSE(km::take_progress({{"current_step", 5}}));
  CHECK_FALSE(km::take_progress({{"current_step", "x"}, {"current_step_metric", {{"deep", 1}}}}));
  auto long_step = km::take_progress({{"current_step", std::string(1 << 20, 's')}});
  REQUIRE(long_step);
  CHECK((*long_step)["current_step"].get<std::string>().size() == km::kMaxProgressText);
}
