# What the CTest scripts of tests/tools share (include it first).

# Stops the script with the message made of the arguments: the test fails with it.
function(fail)
  string(JOIN "" msg ${ARGN})
  message(FATAL_ERROR "${msg}")
endfunction()
