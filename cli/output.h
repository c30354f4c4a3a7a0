// How the CLI speaks: readable text for people, one JSON document with --json.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "isolation/sys/error.h"

namespace nsbox::cli {

struct Output {
  bool json = false;

  void document(const nlohmann::json& j) const;   // --json: the one JSON document on stdout
  void line(const std::string& text) const;       // human mode: a line on stdout
  void note(const std::string& text) const;       // stderr, both modes (warnings, progress)
  // Prints the error (JSON error object on stderr with --json) and returns the exit code.
  int error(const Error& e) const;
};

constexpr int kExitError = 1;
constexpr int kExitUsage = 2;

}  // namespace nsbox::cli
