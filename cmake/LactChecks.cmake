# Two checks of the source tree that ctest runs next to the tests:
#  - clang_format: every C++ and CUDA file of ours matches .clang-format
#    (fix with `scripts/format`);
#  - thread_safety_analysis: clang's -Wthread-safety, as errors, over every
#    translation unit that uses an absl::Mutex (the ABSL_GUARDED_BY
#    annotations are checked, not just written; the CUDA files see the
#    emulation's CUDA headers, so the check needs no toolkit).
# Each is added when its clang tool is installed (scripts/install-deps
# installs both).
set(lact_source_dirs bench client common kernels proto server tests tools worker)
set(lact_sources)
foreach(dir ${lact_source_dirs})
  file(GLOB_RECURSE found CONFIGURE_DEPENDS
       ${PROJECT_SOURCE_DIR}/${dir}/*.cc ${PROJECT_SOURCE_DIR}/${dir}/*.h
       ${PROJECT_SOURCE_DIR}/${dir}/*.cu ${PROJECT_SOURCE_DIR}/${dir}/*.cuh)
  list(APPEND lact_sources ${found})
endforeach()

find_program(LACT_CLANG_FORMAT NAMES clang-format clang-format-14)
if(LACT_CLANG_FORMAT)
  add_test(NAME clang_format
           COMMAND ${LACT_CLANG_FORMAT} --dry-run --Werror --style=file ${lact_sources}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(clang_format PROPERTIES LABELS check)
else()
  message(STATUS "lact: no clang-format, the format check is not added")
endif()

find_program(LACT_CLANGXX NAMES clang++ clang++-14)
if(LACT_CLANGXX)
  set(locked)
  foreach(file ${lact_sources})
    if(NOT file MATCHES "\\.cc$" OR file MATCHES "_test\\.cc$" OR file MATCHES "/tools/")
      continue()
    endif()
    string(REGEX REPLACE "\\.cc$" ".h" header ${file})
    file(READ ${file} text)
    if(EXISTS ${header})
      file(READ ${header} header_text)
      string(APPEND text "${header_text}")
    endif()
    string(FIND "${text}" "absl/synchronization/mutex.h" at)
    if(NOT at EQUAL -1)
      list(APPEND locked ${file})
    endif()
  endforeach()
  add_test(NAME thread_safety_analysis
           COMMAND ${LACT_CLANGXX} -fsyntax-only -std=c++20 -Wthread-safety -Werror=thread-safety
                   -Wno-unknown-warning-option -I${PROJECT_SOURCE_DIR} -I${PROJECT_BINARY_DIR}/proto/gen
                   -I${PROJECT_BINARY_DIR}/server/gen
                   -isystem ${PROJECT_SOURCE_DIR}/tools/cuda-emu/include ${locked})
  set_tests_properties(thread_safety_analysis PROPERTIES LABELS check)
else()
  message(STATUS "lact: no clang++, the thread-safety analysis is not added")
endif()
