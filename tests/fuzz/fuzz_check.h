// What every fuzz target shares: a check that stops the run with the failed condition
// (libFuzzer then keeps the input as crash-<sha1>), and the JSON parse the product uses.
#pragma once

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include <nlohmann/json.hpp>

#define FUZZ_CHECK(condition)                                                                  \
  do {                                                                                         \
    if (!(condition)) {                                                                        \
      std::fprintf(stderr, "fuzz check failed: %s (%s:%d)\n", #condition, __FILE__, __LINE__); \
      std::abort();                                                                            \
    }                                                                                          \
  } while (0)

namespace nsbox::fuzz {

// As frames, state files and manifests are parsed: no exceptions, discarded when malformed.
inline nlohmann::json parse_json(std::string_view text) { return nlohmann::json::parse(text, nullptr, false); }

// Whether `j` holds a number JSON text cannot carry (1e999 parses as infinity, which is
// written back as null): such a document does not survive encode() unchanged, by design.
inline bool has_non_finite(const nlohmann::json& j) {
  if (j.is_number_float()) return !std::isfinite(j.get<double>());
  if (j.is_structured())
    for (const auto& e : j)
      if (has_non_finite(e)) return true;
  return false;
}

}  // namespace nsbox::fuzz
