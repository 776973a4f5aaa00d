// A tensor-parallel model's shards gathered into the full, unpadded tensors of the model they
// were cut from (the inverse of make_gpt2_registry's holdings): what a Hugging Face
// directory, an evaluation or a sample on one rank needs. Collective over the tp group.
#pragma once

#include <span>
#include <vector>

#include "comm/communicator.h"
#include "model/gpt_params.h"

namespace mixpar::ch06 {

// shards[i]: this rank's tensor of registry entry i (its parameter, an FP32 master, ...).
// Returns, on every rank of tp, one full tensor per entry under its name, FP32, with wte cut
// back to the config's vocabulary (the padding rows dropped). tp of size 1: copies.
std::vector<NamedTensor> gather_full_tensors(Communicator& tp, const ParamRegistry& registry,
                                             std::span<const Tensor> shards,
                                             std::int64_t vocab_size);

}  // namespace mixpar::ch06
