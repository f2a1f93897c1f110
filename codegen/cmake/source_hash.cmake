# Writes OUT: a header defining KILN_CODEGEN_SOURCE_HASH, the SHA-256 of the backend's sources
# (FILES, a ;-list). It goes into every kernel cache key, so an object compiled by an older
# backend is never loaded by a newer one, even from a long-lived disk cache. The header is
# rewritten only when the hash changes (no needless rebuilds).
set(all "")
foreach(f IN LISTS FILES)
  file(SHA256 "${f}" h)
  string(APPEND all "${h}")
endforeach()
string(SHA256 hash "${all}")
set(text "#pragma once\n#define KILN_CODEGEN_SOURCE_HASH \"${hash}\"\n")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
  if(old STREQUAL text)
    return()
  endif()
endif()
file(WRITE "${OUT}" "${text}")
