// sim/text_escape.h: one way to put a string into a CSV field or a JSON string, for every table
// the simulator and validation write (simulate --format json, sweep, compare, validate).
//
//   CsvField("a,b")      -> "\"a,b\""   (quoted only when it holds a comma, quote or newline;
//                                         a newline becomes a space: one row per line)
//   JsonEscaped("x\"y")  -> "x\\\"y"     (without the surrounding quotes)
//   JsonQuoted("x")      -> "\"x\""
#pragma once

#include <string>

namespace poseidon::sim {

std::string CsvField(const std::string& s);
// Escapes ", \ and control characters (\n as \n, the others as \u00XX).
std::string JsonEscaped(const std::string& s);
inline std::string JsonQuoted(const std::string& s) { return "\"" + JsonEscaped(s) + "\""; }

}  // namespace poseidon::sim
