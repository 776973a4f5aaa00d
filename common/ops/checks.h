// Argument checks shared by every op: defined, on the CPU, a dtype the ops compute with
// (f32, f16, bf16; f64 for references), and the expected shape. Errors name the op, the
// argument and what was found, so a wrong call is fixed from the message alone.
#pragma once

#include <initializer_list>

#include "tensor/tensor.h"

namespace mixpar::ops {

// Throws std::invalid_argument unless t is defined, lives on the CPU and has dtype f32, f16,
// bf16 or f64. `op` and `name` go into the message ("matmul: 'a' is on cuda ...").
void check_operand(const Tensor& t, const char* op, const char* name);
void check_shape(const Tensor& t, const Shape& want, const char* op, const char* name);
void check_2d(const Tensor& t, const char* op, const char* name);
void check_same_numel(const Tensor& a, const Tensor& b, const char* op, const char* a_name,
                      const char* b_name);
// Throws unless the byte ranges of `out` and `in` are disjoint (for ops that do not allow
// writing over an input, such as GEMM).
void check_no_overlap(const Tensor& out, const Tensor& in, const char* op, const char* out_name,
                      const char* in_name);

// True when any of the tensors is f64: the op then computes in double (reference mode).
bool any_f64(std::initializer_list<const Tensor*> ts);

}  // namespace mixpar::ops
