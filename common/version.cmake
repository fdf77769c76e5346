# Run at every build (cmake -P, common/CMakeLists.txt): writes OUT, the header holding the git
# commit SOURCE_DIR is checked out at, or "unknown" when it is no git checkout of its own (a
# tarball, or a folder inside another repository) or GIT is empty. The file is rewritten only
# when the commit changed, so only a new commit recompiles version.cc.
set(commit unknown)
if(GIT)
  execute_process(COMMAND ${GIT} -C ${SOURCE_DIR} rev-parse --show-toplevel HEAD
                  OUTPUT_VARIABLE out RESULT_VARIABLE rc ERROR_QUIET
                  OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(rc EQUAL 0)
    string(REPLACE "\n" ";" out "${out}")
    list(GET out 0 top)
    list(GET out 1 head)
    file(REAL_PATH ${SOURCE_DIR} source)
    file(REAL_PATH ${top} top)
    if(top STREQUAL source)
      string(SUBSTRING ${head} 0 12 commit)
    endif()
  endif()
endif()
file(CONFIGURE OUTPUT ${OUT} CONTENT
     "// Written by common/version.cmake at build time.\n#pragma once\n\nnamespace diloco {\ninline constexpr char kVersionCommit[] = \"${commit}\";\n}  // namespace diloco\n")
