// Host checks behind `nsbox doctor`: each names what is missing and how to fix it.
#pragma once

#include <string>
#include <vector>

namespace nsbox::preflight {

enum class Level { kOk, kWarn, kFail };

struct Check {
  std::string name;    // "user namespaces"
  Level level = Level::kOk;
  std::string detail;  // what was found
  std::string fix;     // what to do, when not ok
};

std::vector<Check> run_all();
std::string_view level_name(Level l);

}  // namespace nsbox::preflight
