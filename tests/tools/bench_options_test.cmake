# CTest script for kiln-bench's --input and --variants and for tools/bench/sweep.py (bench.options):
#   cmake -DKILN_BENCH=<exe> -DSWEEP=<sweep.py> [-DPYTHON=<python3>] [-DDEVICE=cuda] -DWORK=<scratch dir>
#         -P bench_options_test.cmake
# kiln-bench --input gives a workload other sizes (recorded in the record's inputs) and
# --variants compiled times compiled alone (eager: checked "skipped", no median); --profile adds
# the compiled program's kernels, each with its calls and the bytes one call moves, and --trace
# their timeline (two spans of the softmax kernel in a Trace Event file). sweep.py runs
# it per setting of a tuning variable and writes one record per workload and setting, a
# workload with its own sizes included, and its table; on a GPU (DEVICE=cuda: the emulated
# driver in CI, where the CUDA backend reads the variables) a variable out of range fails it.
# compare.py and sweep.py rewrite their tables from their records (--summarize), and compare.py
# fails a run that left a workload without a kiln compiled record. peers.py --serve and
# compare.py --one-peers-process: one peers process for several workloads.
cmake_minimum_required(VERSION 3.25)

include("${CMAKE_CURRENT_LIST_DIR}/script_util.cmake")

if(NOT DEVICE)
  set(DEVICE cpu)
endif()
file(MAKE_DIRECTORY "${WORK}")
set(json_file "${WORK}/bench.json")
file(REMOVE "${json_file}")
execute_process(
  COMMAND "${KILN_BENCH}" --device ${DEVICE} --tier small --filter softmax --input x=8x3000 --variants compiled --reps 2 --min-time 0
          --no-compile-time --profile --trace "${WORK}/traces" --json "${json_file}"
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc STREQUAL "0")
  fail("kiln-bench: exit status '${rc}', expected 0\n${out}\n${err}")
endif()
file(READ "${WORK}/traces/softmax.trace.json" trace)
string(JSON spans LENGTH "${trace}" traceEvents)
string(REGEX MATCHALL "\"name\": \"softmax @graph0 [0-9a-f]+: k0 rowwise softmax 8x3000 f32\", \"cat\": \"kernel\", \"ph\": \"X\""
       kernel_spans "${trace}")
list(LENGTH kernel_spans nspans)
if(NOT nspans EQUAL 2)
  fail("kiln-bench --trace: ${nspans} spans of the softmax kernel in softmax.trace.json, expected 2:\n${trace}")
endif()
file(READ "${json_file}" doc)
string(JSON n LENGTH "${doc}")
set(seen "")
math(EXPR last "${n} - 1")
foreach(i RANGE 0 ${last})
  string(JSON rec GET "${doc}" ${i})
  string(JSON tool GET "${rec}" tool)
  if(NOT tool STREQUAL "kiln")
    continue()
  endif()
  string(JSON variant GET "${rec}" variant)
  string(JSON inputs GET "${rec}" inputs)
  string(JSON check GET "${rec}" check)
  string(JSON type TYPE "${rec}" median_ms)
  if(NOT inputs STREQUAL "x: f32[8, 3000]")
    fail("kiln-bench --input: ${variant} record's inputs '${inputs}', expected 'x: f32[8, 3000]'")
  endif()
  if(variant STREQUAL "compiled" AND (NOT check STREQUAL "ok" OR NOT type STREQUAL "NUMBER"))
    fail("kiln-bench --variants compiled: compiled has check '${check}', median ${type}: ${rec}")
  endif()
  if(variant STREQUAL "compiled")
    # softmax of [8, 3000] float32: one row-wise kernel reading and writing 96000 bytes, run twice
    string(JSON nk ERROR_VARIABLE kerr LENGTH "${rec}" kernels)
    if(kerr OR NOT nk EQUAL 1)
      fail("kiln-bench --profile: expected one kernel in the compiled record: ${rec}")
    endif()
    string(JSON kname GET "${rec}" kernels 0 name)
    string(JSON kcalls GET "${rec}" kernels 0 calls)
    string(JSON kbytes GET "${rec}" kernels 0 bytes)
    if(NOT kname MATCHES "^softmax @graph0 [0-9a-f]+: k0 rowwise softmax 8x3000 f32$" OR NOT kcalls EQUAL 2
       OR NOT kbytes EQUAL 192000)
      fail("kiln-bench --profile: kernel '${kname}', ${kcalls} calls, ${kbytes} bytes; expected the softmax kernel, "
           "2 calls, 192000 bytes")
    endif()
    if(NOT out MATCHES "\n +2 x +[0-9.]+ us +192000 B +[0-9.]+ GB/s")
      fail("kiln-bench --profile: no kernel line under the workload's row:\n${out}")
    endif()
  endif()
  if(variant STREQUAL "eager" AND (NOT check STREQUAL "skipped" OR NOT type STREQUAL "NULL"))
    fail("kiln-bench --variants compiled: eager has check '${check}', median ${type}: ${rec}")
  endif()
  list(APPEND seen ${variant})
endforeach()
if(NOT "compiled" IN_LIST seen OR NOT "eager" IN_LIST seen)
  fail("kiln-bench: expected an eager and a compiled record, got '${seen}'")
endif()

if(NOT PYTHON)
  message(STATUS "no python3: sweep.py not checked")
  return()
endif()
file(REMOVE_RECURSE "${WORK}/sweep")
execute_process(
  COMMAND "${PYTHON}" "${SWEEP}" --kiln-bench "${KILN_BENCH}" --device ${DEVICE} --tier small --filter "poly,softmax/x=8x3000" --setting ""
          --setting "KILN_CUDA_TILE=64 KILN_CUDA_GRID_PER_SM=0" --reps 2 --min-time 0 --threads 2 --out "${WORK}/sweep"
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc STREQUAL "0")
  fail("sweep.py: exit status '${rc}', expected 0\n${out}\n${err}")
endif()
file(READ "${WORK}/sweep/sweep.json" doc)
string(JSON n LENGTH "${doc}")
if(NOT n EQUAL 4)
  fail("sweep.py: ${n} records, expected 4 (two workloads, two settings)\n${doc}")
endif()
math(EXPR last "${n} - 1")
foreach(i RANGE 0 ${last})
  string(JSON rec GET "${doc}" ${i})
  string(JSON check GET "${rec}" check)
  string(JSON type TYPE "${rec}" median_ms)
  if(NOT check STREQUAL "ok" OR NOT type STREQUAL "NUMBER")
    fail("sweep.py: record ${i}: check '${check}', median ${type}: ${rec}")
  endif()
endforeach()
file(READ "${WORK}/sweep/sweep.txt" table)
if(NOT table MATCHES "softmax/x=8x3000" OR NOT table MATCHES "KILN_CUDA_TILE=64 KILN_CUDA_GRID_PER_SM=0")
  fail("sweep.py: the table lacks a workload or a setting:\n${table}")
endif()
# --summarize writes the table of a run cut short (sweep.py's and compare.py's) from its records
file(REMOVE "${WORK}/sweep/sweep.txt")
execute_process(COMMAND "${PYTHON}" "${SWEEP}" --summarize "${WORK}/sweep" OUTPUT_VARIABLE out RESULT_VARIABLE rc)
file(READ "${WORK}/sweep/sweep.txt" again)
if(NOT rc STREQUAL "0" OR NOT again STREQUAL table)
  fail("sweep.py --summarize: status ${rc}, a table other than the run's:\n${again}\nexpected\n${table}")
endif()
get_filename_component(bench_dir "${SWEEP}" DIRECTORY)
set(compare "${bench_dir}/compare.py")
file(REMOVE_RECURSE "${WORK}/compare")
execute_process(
  COMMAND "${PYTHON}" "${compare}" --kiln-bench "${KILN_BENCH}" --tier small --filter poly --no-peers --no-compile-time
          --reps 2 --min-time 0 --profile --out "${WORK}/compare"
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc STREQUAL "0")
  fail("compare.py: exit status '${rc}', expected 0\n${out}\n${err}")
endif()
file(REMOVE "${WORK}/compare/table.txt")
execute_process(COMMAND "${PYTHON}" "${compare}" --summarize "${WORK}/compare" OUTPUT_VARIABLE out RESULT_VARIABLE rc)
file(READ "${WORK}/compare/table.txt" ctable)
if(NOT rc STREQUAL "0" OR NOT ctable MATCHES "\npoly +[0-9]")
  fail("compare.py --summarize: status ${rc}, no row for poly:\n${ctable}")
endif()
# --profile: poly's one kernel in the third table, and the run against the targets
if(NOT ctable MATCHES "\npoly +2 +[0-9.]+ +[0-9.]+ +[0-9.]+% +poly @graph0 [0-9a-f]+: k0 elementwise mul,add [0-9]+ f32\n"
   OR NOT ctable MATCHES "\nkiln compiled against kiln eager: ahead or level on [01] of 1 \\(lowest ratio [0-9.]+x\\)"
   OR NOT ctable MATCHES "\nkernels at 85% of the copy bandwidth or more: [01] of 1 ")
  fail("compare.py --profile: no kernel table or no run against the targets:\n${ctable}")
endif()
# a workload kiln-bench measured nothing for (no driver to load) fails the run
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env KILN_CUDA_DRIVER=${WORK}/no-such-driver.so
          "${PYTHON}" "${compare}" --kiln-bench "${KILN_BENCH}" --device cuda --tier small --filter poly --no-peers
          --no-compile-time --out "${WORK}/compare-none"
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(rc STREQUAL "0" OR NOT out MATCHES "no kiln compiled record for poly")
  fail("compare.py: status ${rc} for a workload with no record\n${out}\n${err}")
endif()

# peers.py --serve answers one request per line in one process (a bad line too), and compare.py
# --one-peers-process asks it for each workload in turn (peers that are not installed are skipped:
# what is tested is the one process's protocol, with whichever peers this Python has)
execute_process(COMMAND "${PYTHON}" -c "import numpy" RESULT_VARIABLE no_numpy OUTPUT_QUIET ERROR_QUIET)
if(no_numpy)
  message(STATUS "peers.py --serve: skipped (this Python has no NumPy)")
else()
  file(WRITE "${WORK}/requests.txt" "poly ${WORK}/serve-poly.json\nnosuch ${WORK}/serve-x.json\nsoftmax ${WORK}/serve-softmax.json\n")
  file(REMOVE "${WORK}/serve-poly.json" "${WORK}/serve-softmax.json")
  execute_process(
    COMMAND "${PYTHON}" "${bench_dir}/peers.py" --serve --tier small --peers numexpr --reps 2 --min-time 0
    INPUT_FILE "${WORK}/requests.txt" OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc STREQUAL "0" OR NOT out MATCHES "done 0\n.*done 2\n.*done 0\n" OR NOT EXISTS "${WORK}/serve-poly.json"
     OR NOT EXISTS "${WORK}/serve-softmax.json")
    fail("peers.py --serve: status ${rc}, expected done 0, done 2, done 0 and two record files\n${out}\n${err}")
  endif()
  file(REMOVE_RECURSE "${WORK}/compare-one")
  execute_process(
    COMMAND "${PYTHON}" "${compare}" --kiln-bench "${KILN_BENCH}" --tier small --filter poly,softmax --peers numexpr
            --one-peers-process --no-compile-time --reps 2 --min-time 0 --out "${WORK}/compare-one"
    OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc STREQUAL "0" OR NOT out MATCHES "\\[2/2\\] softmax: kiln-bench [0-9.]+ s, peers [0-9.]+ s \\(request 2 of one process\\)"
     OR out MATCHES "peers.py answered")
    fail("compare.py --one-peers-process: status ${rc}\n${out}\n${err}")
  endif()
endif()

if(NOT DEVICE STREQUAL "cuda")
  return()
endif()
execute_process(
  COMMAND "${PYTHON}" "${SWEEP}" --kiln-bench "${KILN_BENCH}" --device cuda --tier small --filter poly
          --setting "KILN_CUDA_GRID_PER_SM=-1" --reps 2 --min-time 0 --out "${WORK}/sweep-bad"
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(rc STREQUAL "0")
  fail("sweep.py: KILN_CUDA_GRID_PER_SM=-1 passed\n${out}")
endif()
if(NOT out MATCHES "KILN_CUDA_GRID_PER_SM=-1: expected a whole number")
  fail("sweep.py: the bad setting's error is not shown:\n${out}")
endif()
