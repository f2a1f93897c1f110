// The IR text parser's fuzz body, shared by the libFuzzer target (fuzz_parse.cpp) and the
// corpus runner that CTest runs with the normal compiler (corpus_main.cpp).
#pragma once
#include <cstddef>
#include <cstdint>

namespace kiln::fuzz {

enum class Outcome { Rejected, Parsed, Verified };

// Parses `data` as IR text. A kiln::Error is an acceptable answer to any input; when the text
// parses, printing it must give text that parses back to the same print, hash and JSON, and
// verify() must answer without throwing. Anything else (a crash, another exception, a broken
// round trip) prints the input and aborts.
Outcome parse_one(const uint8_t* data, size_t size);

}  // namespace kiln::fuzz
