// Exercise (chapter 3): the memory bill of training before any activation: how many parameters
// a GPT-2 shape has, and how many bytes of model states training it holds on one device.
//
// Parameters (GPT-2: learned positions, LayerNorms with weight and bias, biases on every
// linear layer, the LM head tied to the token embedding so it adds nothing): the token
// embedding [V, C], the position embedding [P, C], n_layer blocks of two LayerNorms, attention
// (c_attn [C, 3C] + bias, c_proj [C, C] + bias) and MLP (c_fc [C, 4C] + bias, c_proj [4C, C] +
// bias), and the final LayerNorm. GPT-2 124M (12 layers, C 768, V 50257, P 1024) has
// 124,439,808.
//
// Model-state bytes per parameter (the ZeRO paper's 2 + 2 + K with K = 12 for mixed-precision
// Adam): the working weights and their gradients in the working precision (4 bytes in FP32,
// 2 in FP16/BF16), FP32 master weights only under mixed precision (in pure FP32 the working
// weights are the masters), and the optimizer's FP32 state: AdamW's m and v, SGD with
// momentum's one buffer. See ch03_master_weights/README.md (the memory bill) and
// ch03_master_weights/memory_calculator.h, which the tests compare with.
#pragma once

#include <cstdint>

namespace mixpar::exercises {

std::int64_t gpt2_parameters(std::int64_t n_layer, std::int64_t n_embd, std::int64_t vocab,
                             std::int64_t n_positions);

// mixed: FP16/BF16 working weights with FP32 masters (false: pure FP32); adamw: AdamW (false:
// SGD with momentum).
std::int64_t model_state_bytes(std::int64_t parameters, bool mixed, bool adamw);

}  // namespace mixpar::exercises
