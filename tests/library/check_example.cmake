# Runs a C++ example on MODEL and checks its token ids against `pagoda generate --json` with
# the same greedy settings; then runs it on a missing model and checks the error it reports.
# STREAMED: the example assembled its ids from deltas ("deltas: N"), of which there must be
# more than one (one output per step, not one at the end).
set(prompt "The capital of France is")
execute_process(COMMAND ${EXAMPLE} ${MODEL} ${prompt}
  OUTPUT_VARIABLE example_out ERROR_VARIABLE example_err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "example failed (${rc}): ${example_err}")
endif()
string(REGEX MATCH "token_ids:([0-9 ]*)" _ "${example_out}")
string(STRIP "${CMAKE_MATCH_1}" example_ids)

execute_process(COMMAND ${PAGODA} generate --model ${MODEL} --prompt ${prompt} --temperature 0
                        --max-tokens 16 --max-num-seqs 8 --json
  OUTPUT_VARIABLE cli_out ERROR_VARIABLE cli_err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "pagoda generate failed (${rc}): ${cli_err}")
endif()
string(JSON cli_ids_json GET "${cli_out}" token_ids)
string(JSON count LENGTH "${cli_ids_json}")
set(cli_ids "")
math(EXPR last "${count} - 1")
foreach(i RANGE ${last})
  string(JSON id GET "${cli_ids_json}" ${i})
  list(APPEND cli_ids ${id})
endforeach()
list(JOIN cli_ids " " cli_ids)
if(NOT example_ids STREQUAL cli_ids OR example_ids STREQUAL "")
  message(FATAL_ERROR "token ids differ:\n  example:         ${example_ids}\n"
                      "  pagoda generate: ${cli_ids}")
endif()
message(STATUS "example and pagoda generate agree: ${example_ids}")
if(STREAMED)
  string(REGEX MATCH "\ndeltas: ([0-9]+)" _ "${example_out}")
  if(CMAKE_MATCH_1 STREQUAL "" OR CMAKE_MATCH_1 LESS 2)
    message(FATAL_ERROR "the stream should arrive in several deltas, got '${CMAKE_MATCH_1}':\n"
                        "${example_out}")
  endif()
endif()

execute_process(COMMAND ${EXAMPLE} ${MODEL}/does-not-exist
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
# (A line of the library's log may come first: the streaming example's engine thread logs it.)
if(NOT rc EQUAL 1 OR NOT err MATCHES "(^|\n)error: [^\n]*does-not-exist")
  message(FATAL_ERROR "a missing model should end the example with a pagoda::Error naming it "
                      "(exit 1), got exit ${rc}: ${err}")
endif()
