# The fuzz build: tests/fuzz's libFuzzer targets, built by clang in
# build/fuzz as an external project of this build (LACT_FUZZ_ONLY), and one
# ctest per target that fuzzes it briefly from its seed corpus
# (LACT_FUZZ_SECONDS each; label `fuzz`). Added when clang++ and its
# libFuzzer runtime (Debian: libclang-rt-14-dev) are installed.
set(LACT_FUZZ_SECONDS 15 CACHE STRING "Seconds each fuzz target runs under ctest")
find_program(LACT_FUZZ_CLANGXX NAMES clang++ clang++-14)
set(fuzz_runtime "")
if(LACT_FUZZ_CLANGXX)
  execute_process(COMMAND ${LACT_FUZZ_CLANGXX} -print-resource-dir OUTPUT_VARIABLE resource_dir
                  OUTPUT_STRIP_TRAILING_WHITESPACE)
  set(fuzz_runtime ${resource_dir}/lib/linux/libclang_rt.fuzzer-x86_64.a)
endif()
if(NOT EXISTS "${fuzz_runtime}")
  message(STATUS "lact: no clang++ with libFuzzer, the fuzz targets are not built")
  return()
endif()

include(ExternalProject)
set(fuzz_dir ${PROJECT_BINARY_DIR}/fuzz)
ExternalProject_Add(lact_fuzz
  SOURCE_DIR ${PROJECT_SOURCE_DIR}
  BINARY_DIR ${fuzz_dir}
  CMAKE_ARGS -DCMAKE_CXX_COMPILER=${LACT_FUZZ_CLANGXX} -DLACT_FUZZ_ONLY=ON -DCMAKE_BUILD_TYPE=None
  BUILD_ALWAYS ON
  INSTALL_COMMAND "")

foreach(target npy safetensors model_config token_codec job_spec)
  add_test(NAME fuzz_${target}
           COMMAND ${PROJECT_SOURCE_DIR}/tests/fuzz/run-fuzzer ${fuzz_dir}/bin/${target}_fuzz
                   ${PROJECT_SOURCE_DIR}/tests/fuzz/corpus/${target} ${fuzz_dir}/runs/${target}
                   ${LACT_FUZZ_SECONDS})
  set_tests_properties(fuzz_${target} PROPERTIES LABELS fuzz)
endforeach()
