#include "tinyops.h"

#include <torch/library.h>

namespace {

// A limit below zero would swap the bounds of the clamp.
double checked_limit(double limit) {
  TORCH_CHECK(limit >= 0, "clamp_abs: limit must be >= 0, got ", limit);
  return limit;
}

}  // namespace

at::Tensor scale_cpu(const at::Tensor& x, double factor) {
  return x * factor;
}

at::Tensor clamp_abs_cpu(const at::Tensor& x, double limit) {
  const double bound = checked_limit(limit);
  return x.clamp(-bound, bound);
}

TORCH_LIBRARY(tinyops, m) {
  m.def("scale(Tensor x, float factor) -> Tensor");
  m.def("clamp_abs(Tensor x, float limit) -> Tensor");
}

TORCH_LIBRARY_IMPL(tinyops, CPU, m) {
  m.impl("scale", &scale_cpu);
  m.impl("clamp_abs", &clamp_abs_cpu);
}
