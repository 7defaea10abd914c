#include "kernels/cpu/dnnl_engine.h"

namespace lact::cpu {

dnnl::engine& DnnlEngine() {
  static dnnl::engine* const engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

}  // namespace lact::cpu
