# CTest script for KILN_PROFILE=1 (the profile.env test):
#   cmake -DDEMO=<kiln-demo> -DWORK=<scratch dir> -P profile_env_test.cmake
# The demo (the main job) run with KILN_PROFILE=1 exits with status 0 and prints the kernel
# profile on stderr at exit: its header, and the kernels of its compiled branch_sign under their
# graphs' names; KILN_PROFILE_TRACE writes the timeline. With KILN_PROFILE=0 it prints none.
cmake_minimum_required(VERSION 3.25)
file(MAKE_DIRECTORY "${WORK}")

include("${CMAKE_CURRENT_LIST_DIR}/script_util.cmake")

set(trace "${WORK}/demo.trace.json")
file(REMOVE "${trace}")
execute_process(COMMAND ${CMAKE_COMMAND} -E env KILN_PROFILE=1 "KILN_PROFILE_TRACE=${trace}" "${DEMO}"
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc STREQUAL "0")
  fail("KILN_PROFILE=1 kiln-demo: exit status '${rc}', expected 0\n${err}")
endif()
if(NOT err MATCHES "kernel profile: [0-9]+ kernels, [0-9.]+ ms in all\n +total ms +share +calls[^\n]*\n")
  fail("KILN_PROFILE=1 kiln-demo: no kernel profile on stderr:\n${err}")
endif()
if(NOT err MATCHES "cpu +compiled function @graph1 [0-9a-f]+: k0 elementwise mul 10 f32\n")
  fail("KILN_PROFILE=1 kiln-demo: no record of branch_sign's second graph:\n${err}")
endif()
# KILN_PROFILE_TRACE: the timeline, as JSON, with the spans of that graph
if(NOT EXISTS "${trace}")
  fail("KILN_PROFILE_TRACE: no ${trace}\n${err}")
endif()
file(READ "${trace}" doc)
string(JSON n ERROR_VARIABLE jerr LENGTH "${doc}" traceEvents)
if(jerr OR NOT doc MATCHES "\"name\": \"compiled function @graph1 [0-9a-f]+: k0 elementwise mul 10 f32\", \"cat\": \"kernel\", \"ph\": \"X\"")
  fail("KILN_PROFILE_TRACE: ${trace} is no timeline with the demo's kernels (${jerr}):\n${doc}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E env KILN_PROFILE=0 "${DEMO}"
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc STREQUAL "0" OR err MATCHES "kernel profile")
  fail("KILN_PROFILE=0 kiln-demo: exit status '${rc}' (expected 0), and no profile expected:\n${err}")
endif()
