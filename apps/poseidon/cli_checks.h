// apps/poseidon/cli_checks.h: range checks for integer flags with messages a user can act on.
//
// CLI11's PositiveNumber / NonNegativeNumber report "Value 0 not in range 0.000000 to 1.79769e+308";
// these say "--iterations: must be a whole number >= 1, got '0'" (AtLeast, for integer flags) or
// "--seconds-per-size: must be a number > 0, got '0'" (NumberAtLeast). A failed check exits with
// CLI11's code 105 (docs/errors.md).
//
//   app.add_option("--iterations", n)->check(AtLeast(1));
#pragma once

#include <cstdint>
#include <sstream>
#include <string>

#include <CLI/CLI.hpp>

namespace poseidon::app {

inline CLI::Validator AtLeast(int64_t min) {
  return CLI::Validator(
      [min](std::string& value) -> std::string {
        const std::string what = "must be a whole number >= " + std::to_string(min);
        try {
          size_t used = 0;
          const long long v = std::stoll(value, &used);
          if (used != value.size() || v < min) return what + ", got '" + value + "'";
        } catch (const std::exception&) {
          return what + ", got '" + value + "'";
        }
        return std::string();
      },
      "INT>=" + std::to_string(min));
}

// A real number >= min (or > min when strict), e.g. --line-rate-gbps 0.1.
inline CLI::Validator NumberAtLeast(double min, bool strict = false) {
  return CLI::Validator(
      [min, strict](std::string& value) -> std::string {
        std::ostringstream bound;
        bound << min;
        const std::string what = std::string("must be a number ") + (strict ? "> " : ">= ") + bound.str();
        try {
          size_t used = 0;
          const double v = std::stod(value, &used);
          if (used != value.size() || !(strict ? v > min : v >= min)) return what + ", got '" + value + "'";
        } catch (const std::exception&) {
          return what + ", got '" + value + "'";
        }
        return std::string();
      },
      std::string("NUMBER") + (strict ? ">" : ">="));
}

}  // namespace poseidon::app
