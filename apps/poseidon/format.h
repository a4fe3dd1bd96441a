// apps/poseidon/format.h: number formatting shared by the subcommands' tables.
#pragma once

#include <cstdint>
#include <string>

namespace poseidon::app {

// 25557032 -> "25,557,032".
inline std::string Thousands(int64_t v) {
  std::string digits = std::to_string(v < 0 ? -v : v);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return v < 0 ? "-" + out : out;
}

}  // namespace poseidon::app
