# Third-party dependencies, all from Debian 12 packages (see scripts/install-deps).
find_package(Threads REQUIRED)
find_package(OpenMP REQUIRED)
find_package(absl CONFIG REQUIRED)
find_package(nlohmann_json CONFIG REQUIRED)
find_package(GTest CONFIG REQUIRED)

# OpenBLAS, OpenMP flavour: BLAS and our own loops share one OpenMP thread pool,
# and a BLAS call made inside one of our parallel regions runs single-threaded
# instead of oversubscribing the cores.
set(LACT_OPENBLAS_DIR /usr/lib/x86_64-linux-gnu/openblas-openmp)
find_library(LACT_OPENBLAS_LIB NAMES openblas PATHS ${LACT_OPENBLAS_DIR} NO_DEFAULT_PATH REQUIRED)
find_path(LACT_OPENBLAS_INCLUDE cblas.h PATHS /usr/include/x86_64-linux-gnu/openblas-openmp
          NO_DEFAULT_PATH REQUIRED)
add_library(lact_openblas INTERFACE)
target_link_libraries(lact_openblas INTERFACE ${LACT_OPENBLAS_LIB} OpenMP::OpenMP_CXX)
target_include_directories(lact_openblas INTERFACE ${LACT_OPENBLAS_INCLUDE})
# oneDNN (its OpenMP build, sharing the same pool): the CPU backend's float32
# products (dnnl_sgemm, kernels/cpu/blas.h) and the bf16 mode's on the CPU's
# bf16 units (kernels/cpu/bf16_matmul.h).
find_library(LACT_DNNL_LIB NAMES dnnl REQUIRED)
find_path(LACT_DNNL_INCLUDE dnnl.hpp REQUIRED)
add_library(lact_dnnl INTERFACE)
target_link_libraries(lact_dnnl INTERFACE ${LACT_DNNL_LIB} OpenMP::OpenMP_CXX)
target_include_directories(lact_dnnl INTERFACE ${LACT_DNNL_INCLUDE})
# The loader would otherwise pick the pthread flavour through the alternatives link.
set(CMAKE_BUILD_RPATH ${LACT_OPENBLAS_DIR})
set(CMAKE_INSTALL_RPATH ${LACT_OPENBLAS_DIR})
