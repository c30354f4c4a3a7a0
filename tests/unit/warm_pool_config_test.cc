// `nsbox serve --warm` and `--preload`, and PUT /v1/pool's sizes: what is accepted, what is
// refused and how the refusal names the flag (api/warm_pool.h).
#include <catch2/catch.hpp>
#include <map>

#include "api/warm_pool.h"

using nsbox::SizeTier;
using nsbox::api::Json;
using nsbox::api::WarmPoolConfig;

TEST_CASE("warm pool flags: --warm takes SIZE=N pairs, --preload module names or none", "[warm]") {
  auto c = WarmPoolConfig::parse("standard=4,large=1,xlarge=0", std::nullopt);
  REQUIRE(c);
  CHECK(c->sizes == std::map<SizeTier, size_t>{{SizeTier::kStandard, 4}, {SizeTier::kLarge, 1}});  // 0: no pool of that size
  CHECK(c->preload == std::vector<std::string>{"numpy", "pandas", "matplotlib"});
  CHECK(WarmPoolConfig::parse("", std::nullopt)->sizes.empty());
  CHECK(WarmPoolConfig::parse("medium=2", std::string("none"))->preload.empty());
  CHECK(WarmPoolConfig::parse("medium=2", std::string("numpy,sklearn.linear_model"))->preload ==
        std::vector<std::string>{"numpy", "sklearn.linear_model"});
}

TEST_CASE("warm pool flags: bad --warm and --preload values are refused with the flag named", "[warm]") {
  for (const char* bad : {"standard", "standard=", "standard=x", "standard=-1", "standard=257", "standard=1000", "huge=1",
                          "standard=1,,large=1", "standard=1,standard=2", "=1"}) {
    auto c = WarmPoolConfig::parse(bad, std::nullopt);
    INFO(bad);
    REQUIRE(!c);
    CHECK(c.error().message.find("--warm") != std::string::npos);
  }
  for (const char* bad : {"os;rm", "numpy,", "a..b", ".a", "a.", "1abc", "pandas as pd", "x'y", ""}) {
    auto c = WarmPoolConfig::parse("standard=1", std::string(bad));
    INFO(bad);
    REQUIRE(!c);
    CHECK(c.error().message.find("--preload") != std::string::npos);
  }
}

TEST_CASE("warm pool flags: PUT /v1/pool's sizes are bounded as --warm is", "[warm]") {
  auto ok = WarmPoolConfig::sizes_from_json(Json{{"standard", 3}, {"large", 0}});
  REQUIRE(ok);
  CHECK(ok->at(SizeTier::kStandard) == 3);
  CHECK(ok->at(SizeTier::kLarge) == 0);  // kept: it ends that size's pool
  for (const Json& bad : {Json::array(), Json{{"standard", -1}}, Json{{"standard", 257}}, Json{{"standard", "2"}},
                          Json{{"huge", 1}}, Json{{"standard", 1.5}}})
    CHECK(!WarmPoolConfig::sizes_from_json(bad));
}
