// Diagnostics a user turns on with KILN_LOGS (as TORCH_LOGS): each channel prints one line per
// event on stderr, "[kiln:<channel>] what happened, where in the user's code, and the fix".
//   KILN_LOGS=recompiles,guards   two channels;   KILN_LOGS=all   every channel
// docs/compile.md, "Diagnostics", lists what each channel says.
#pragma once
#include <string>
#include <string_view>

namespace kiln::logs {

enum class Channel {
  Recompiles,   // every trace of a compiled function, with its cause
  Guards,       // every guard recorded while tracing, and every guard that failed on replay
  GraphBreaks,  // every graph break while tracing: what and where
  Cache,        // the kernel cache: hits, misses, entries that could not be read or written
  PerfHints,    // work that runs slower than it could: a graph on the reference executor, a
                // function past its recompile budget running eagerly, a very long trace
};
std::string_view name(Channel c);
// Whether KILN_LOGS turns the channel on (read at each call: logging is off the hot paths).
bool enabled(Channel c);
// Prints the line on the channel when it is on.
void emit(Channel c, const std::string& line);

}  // namespace kiln::logs
