// Context-parallel causal attention: each of cp ranks holds T / cp of the sequence's rows of
// the fused [B, T/cp, 3C] q|k|v buffer and computes the attention output of its own rows,
// equal to the unsplit model's (layers::attention_forward) up to the order of the sums. Two
// algorithms: the ring (ring_attention.h: K/V blocks travel, the partial outputs merge by
// log-sum-exp) and all-to-all (ulysses_attention.h: the sequence split swapped for a head
// split around the attention). What forward keeps for backward is the algorithm's own.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "ch06_tensor_parallel/context_split.h"
#include "comm/communicator.h"

namespace mixpar::ch06 {

enum class CpAlgo : std::uint8_t { kRing, kAllToAll };
std::string_view cp_algo_name(CpAlgo algo);  // "ring", "all-to-all"

// The failure modes the lesson shows (each off in a correct run).
struct CpAttentionBugs {
  bool unmasked_diagonal = false;  // a diagonal block computed like a full one: sees the future
  bool skip_lse_merge = false;     // partial outputs added without their log-sum-exp weights
};

struct CpAttentionSaved {
  Tensor a, b;  // ring: lse [B, H, T/cp] f32; all-to-all: the head group's qkv and att
};

class CpAttention {
 public:
  virtual ~CpAttention() = default;
  // qkv [B, T/cp, 3C] of this rank's rows -> out [B, T/cp, C].
  virtual void forward(const Tensor& qkv, Tensor& out, CpAttentionSaved& saved) = 0;
  // dout [B, T/cp, C] -> dqkv [B, T/cp, 3C]; qkv, out and saved as forward left them.
  virtual void backward(const Tensor& dout, const Tensor& qkv, const Tensor& out,
                        const CpAttentionSaved& saved, Tensor& dqkv) = 0;
  virtual CpAlgo algo() const = 0;
};

// cp_comm: the cp group (nullptr: cp 1, no communication); layout: where every rank's rows
// sit in the sequence (cp_layout), the same on every rank. Throws InputError when the
// algorithm cannot split this model (all-to-all: cp must divide n_head).
std::unique_ptr<CpAttention> make_cp_attention(CpAlgo algo, Communicator* cp_comm,
                                               const CpLayout& layout, std::int64_t n_head,
                                               const CpAttentionBugs& bugs = {});

// Bytes one rank sends per layer (fwd, bwd), f32 activations of `elem_bytes`, local rows
// Tl = T / cp, C channels:
//   ring        forward (cp - 1) x 2 B Tl C (K and V, cp - 1 hops)
//               backward (cp - 1) x 4 B Tl C + 2 B Tl C (K, V and their gradients, which
//               take one more hop home)
//   all-to-all  forward (cp - 1)/cp x (3 + 1) B Tl C (q, k, v to head groups, output back)
//               backward the same (the output gradient in, dq, dk, dv back)
struct CpTraffic {
  double forward = 0, backward = 0;
};
CpTraffic cp_traffic_formula(CpAlgo algo, int cp, std::int64_t B, std::int64_t local_len,
                             std::int64_t C, std::size_t elem_bytes);

// The tag of the cp ranks' messages (kept apart from other traffic between the same ranks).
inline constexpr int kCpTag = 0x6370;  // "cp"

}  // namespace mixpar::ch06
