# Run at every build (cmake -P): writes OUT, the build's commit, its date and whether the source tree had
# uncommitted changes, only when they changed (so that nothing rebuilds otherwise). Without git: "unknown".
execute_process(COMMAND git -C ${SRC} rev-parse HEAD OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE
                RESULT_VARIABLE rc ERROR_QUIET)
if(NOT rc EQUAL 0)
  set(commit "unknown")
endif()
execute_process(COMMAND git -C ${SRC} log -1 --format=%cs HEAD OUTPUT_VARIABLE date OUTPUT_STRIP_TRAILING_WHITESPACE
                RESULT_VARIABLE rc ERROR_QUIET)
if(NOT rc EQUAL 0 OR date STREQUAL "")
  set(date "unknown")
endif()
set(dirty "false")
execute_process(COMMAND git -C ${SRC} status --porcelain --untracked-files=no OUTPUT_VARIABLE changes
                RESULT_VARIABLE rc ERROR_QUIET)
if(rc EQUAL 0 AND NOT changes STREQUAL "")
  set(dirty "true")
endif()
set(text "// Generated at build time by cmake/BuildInfo.cmake.\n#include \"experiments/run/provenance.h\"\n\nnamespace chaosbed::run {\nBuildInfo buildInfo() { return {\"${VERSION}\", \"${commit}\", ${dirty}, \"${date}\"}; }\n}  // namespace chaosbed::run\n")
if(EXISTS ${OUT})
  file(READ ${OUT} old)
endif()
if(NOT old STREQUAL text)
  file(WRITE ${OUT} "${text}")
endif()
