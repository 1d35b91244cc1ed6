#pragma once

#include <ATen/ATen.h>

at::Tensor scale_cpu(const at::Tensor& x, double factor);
at::Tensor scale_cuda(const at::Tensor& x, double factor);
at::Tensor clamp_abs_cpu(const at::Tensor& x, double limit);
