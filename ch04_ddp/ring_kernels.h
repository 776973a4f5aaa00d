// The arithmetic of one ring hop: incoming partial result op this rank's own values, written in
// the dtype of the destination (rounded there, without saturation). The ring rounds at every
// hop when the destination is the buffer's 16- or 8-bit dtype; with an FP32 destination the
// partial result keeps FP32's precision until the chunk's owner rounds it once.
#pragma once

#include "comm/communicator.h"
#include "tensor/tensor.h"

namespace mixpar::ch04 {

// out[i] = incoming[i] op own[i], accumulated in FP32 (double when any side is f64), rounded
// once into out's dtype (an overflow becomes inf, or NaN for e4m3: never clamped). kMax
// propagates NaN, as the backends' max does. CPU tensors with the same numel; out may alias
// own or incoming element for element.
void hop_combine(const Tensor& incoming, const Tensor& own, Tensor& out, ReduceOp op);

}  // namespace mixpar::ch04
