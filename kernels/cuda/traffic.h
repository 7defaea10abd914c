// Launch and global-memory accounting for the CUDA backend. Every kernel
// wrapper of kernels/cuda and every GEMM of device.cc calls NoteLaunch with
// its launches and the bytes its arguments name: each element of its inputs
// read once and each of its outputs written once, the least DRAM traffic
// the work can have (a kernel that reads an element twice still counts it
// once; a GEMM counts its operands once). The counts are process-wide, by
// family (a wrapper's name, or its kernel's where it launches several); a bench reads
// them around a run to see launches per tile and bytes per token by family.
// Thread-safe; NoteLaunch costs one uncontended mutex.
#ifndef LACT_KERNELS_CUDA_TRAFFIC_H_
#define LACT_KERNELS_CUDA_TRAFFIC_H_

#include <cstdint>
#include <map>
#include <string>

namespace lact::cuda {

struct FamilyTraffic {
  int64_t launches = 0;
  int64_t bytes_read = 0;
  int64_t bytes_written = 0;

  bool operator==(const FamilyTraffic& o) const {
    return launches == o.launches && bytes_read == o.bytes_read && bytes_written == o.bytes_written;
  }
};

// Adds `launches` launches of `family` reading and writing these bytes.
void NoteLaunch(const char* family, int64_t bytes_read, int64_t bytes_written,
                int64_t launches = 1);

// Everything noted since the process started or the last ResetTraffic.
std::map<std::string, FamilyTraffic> TrafficByFamily();
void ResetTraffic();

}  // namespace lact::cuda

#endif  // LACT_KERNELS_CUDA_TRAFFIC_H_
