# Shared precompiled headers (cmake/pch/). Most files parse the same third-party headers
# (Abseil, cppzmq, flatbuffers; gtest in the tests): with them precompiled, the shard's, the
# sync client's and their tests' files took about half the CPU time in the ASan build (clang 14,
# Debug) and 10-25% less in the release build (g++ 12, -O3). An owner target compiles one header
# once; every target of the owner's kind (static library or executable) under a folder reuses
# it when its compile flags are the owner's, since a header compiled with other flags is
# refused (g++: -Winvalid-pch, an error with DILOCO_WERROR; clang: an error). So a target with
# options of its own (e.g. -O3, -ffp-contract=off) or CUDA sources keeps parsing the headers
# itself, as does a file with options of its own (e.g. -mavx2). The libraries and programs
# share theirs in every build, the tests theirs in the clang builds (ASan, TSan, fuzz; see
# diloco_pch below); -DDILOCO_PCH=OFF builds without (e.g. to check that each file includes
# what it uses).

function(_diloco_pch_targets dir out)
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(sub IN LISTS subdirs)
    _diloco_pch_targets(${sub} sub_targets)
    list(APPEND targets ${sub_targets})
  endforeach()
  set(${out} ${targets} PARENT_SCOPE)
endfunction()

# diloco_share_pch(OWNER DIR [LINKS regex] [UNLESS_LINKS regex]): the targets under DIR (and
# its subfolders) of OWNER's kind and flags, linking a library that matches LINKS if given and
# none that matches UNLESS_LINKS, reuse OWNER's precompiled header.
function(diloco_share_pch owner dir)
  cmake_parse_arguments(PARSE_ARGV 2 arg "" "LINKS;UNLESS_LINKS" "")
  get_target_property(owner_type ${owner} TYPE)
  get_target_property(owner_options ${owner} COMPILE_OPTIONS)
  _diloco_pch_targets(${dir} targets)
  foreach(t IN LISTS targets)
    get_target_property(type ${t} TYPE)
    get_target_property(options ${t} COMPILE_OPTIONS)
    get_target_property(libs ${t} LINK_LIBRARIES)
    get_target_property(sources ${t} SOURCES)
    get_target_property(reused ${t} PRECOMPILE_HEADERS_REUSE_FROM)
    get_target_property(own ${t} PRECOMPILE_HEADERS)
    if(t STREQUAL owner OR NOT type STREQUAL owner_type OR NOT options STREQUAL owner_options
       OR reused OR own OR sources MATCHES "\\.cu(;|$)"
       OR (arg_LINKS AND NOT libs MATCHES "${arg_LINKS}")
       OR (arg_UNLESS_LINKS AND libs MATCHES "${arg_UNLESS_LINKS}"))
      continue()
    endif()
    target_precompile_headers(${t} REUSE_FROM ${owner})
    get_target_property(source_dir ${t} SOURCE_DIR)
    foreach(s IN LISTS sources)
      cmake_path(ABSOLUTE_PATH s BASE_DIRECTORY ${source_dir})
      foreach(p COMPILE_OPTIONS COMPILE_FLAGS COMPILE_DEFINITIONS)
        get_source_file_property(v ${s} DIRECTORY ${source_dir} ${p})
        if(v)
          set_source_files_properties(${s} DIRECTORY ${source_dir} PROPERTIES
                                      SKIP_PRECOMPILE_HEADERS ON)
        endif()
      endforeach()
    endforeach()
  endforeach()
endfunction()

# The owners (cmake/pch/): the static libraries share library.h; the gtest executables test.h
# (library.h and gtest); the other programs library.h, compiled as an executable's.
function(diloco_pch)
  if(NOT DILOCO_PCH)
    return()
  endif()
  set(dir ${PROJECT_SOURCE_DIR}/cmake/pch)
  add_library(diloco_library_pch STATIC ${dir}/owner.cc)
  add_executable(diloco_program_pch ${dir}/owner.cc)
  set(owners diloco_library_pch:library diloco_program_pch:library)
  # g++ 12 -O3 with test.h reported false -Warray-bounds and -Wstringop-overflow inside
  # std::string (char_traits.h) in three test files that compile cleanly without it: the tests
  # share it in the clang builds (ASan, TSan, fuzz) only.
  if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    add_executable(diloco_test_pch ${dir}/owner.cc)
    target_link_libraries(diloco_test_pch PRIVATE GTest::gtest)
    list(APPEND owners diloco_test_pch:test)
  endif()
  foreach(owner_header IN LISTS owners)
    string(REPLACE ":" ";" owner_header ${owner_header})
    list(GET owner_header 0 owner)
    list(GET owner_header 1 header)
    target_include_directories(${owner} PRIVATE ${PROJECT_SOURCE_DIR})
    target_precompile_headers(${owner} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${dir}/${header}.h>)
  endforeach()
  diloco_share_pch(diloco_library_pch ${PROJECT_SOURCE_DIR})
  if(TARGET diloco_test_pch)
    diloco_share_pch(diloco_test_pch ${PROJECT_SOURCE_DIR} LINKS "GTest::gtest")
  endif()
  diloco_share_pch(diloco_program_pch ${PROJECT_SOURCE_DIR} UNLESS_LINKS "GTest::gtest")
endfunction()
