// The lesson's context-parallel runs: one causal attention layer's forward and backward on cp
// local ranks (threads), each holding its rows of the sequence, beside the unsplit layer on one
// device (layers::attention_forward / _backward); what each run measured: the assembled output
// and input gradient against one device's, the attention work of every rank, the bytes every
// rank sent, and the activation bytes every rank's ledger holds after forward.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ch06_tensor_parallel/cp_attention.h"
#include "model/gpt.h"

namespace mixpar::ch06 {

struct CpCase {
  std::int64_t B = 2, T = 32, C = 32, n_head = 4;
  int cp = 2;
  CpAlgo algo = CpAlgo::kRing;
  CpSplit split = CpSplit::kZigzag;
  DType dtype = DType::kF32;
  std::uint64_t seed = 11;
  CpAttentionBugs bugs;
  // The bug "zigzag chunk positions taken as contiguous": the rows are split zigzag but the
  // ranks mask (and would embed) them as if the split were contiguous.
  bool positions_as_contiguous = false;
  // >= 0: add 1 to the keys and values of this position (does an earlier row see it?)
  std::int64_t perturb_position = -1;
  bool synchronous_sends = false;  // the local backend's NCCL-like sends

  // The case of one layout, every other field at its default.
  static CpCase of(int cp, CpAlgo algo, CpSplit split) {
    CpCase c;
    c.cp = cp;
    c.algo = algo;
    c.split = split;
    return c;
  }
};

struct CpCaseResult {
  std::vector<float> out, dqkv;          // assembled in true position order, [B, T, C], [B, T, 3C]
  std::vector<float> ref_out, ref_dqkv;  // one device
  double out_error = 0, grad_error = 0;  // max |cp - one device|
  double out_scale = 0, grad_scale = 0;  // max |one device|
  std::vector<CpWork> work;              // per rank: what the ring computed (all-to-all: 0)
  std::vector<std::size_t> forward_bytes, backward_bytes;  // per rank, sent
  std::vector<std::size_t> activation_bytes;  // per rank: kActivations live after forward
  std::size_t one_device_activation_bytes = 0;
};

CpCaseResult run_cp_case(const CpCase& c);

// The tolerance of a cp run against one device, from the change of summation order alone:
// every output is a softmax-weighted sum over at most T keys and the ring regroups it into
// per-block sums merged by exp/log (2 per merge, at most 2cp merges per row); a sum of n f32
// terms reordered moves by at most about n u max|term| (Higham's gamma_n, u = 2^-24), so
//   tol = (2 T + 8 cp) u scale,   scale = max |one device's value|
// for the output; the gradients chain three such sums (dP = dO V^T, dS, dS K): three times it.
double cp_output_tolerance(const CpCase& c, double scale);
double cp_grad_tolerance(const CpCase& c, double scale);

// Max |a - b| over two equal-length vectors.
double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b);

}  // namespace mixpar::ch06

namespace mixpar::ch06 {

// A few SGD steps of one attention layer's q|k|v projection W [C, 3C] (replicated on every cp
// rank) on one fixed batch x with the loss sum(out * R) / (B T) for a fixed random R: each rank
// holds its rows, so its dW = x_rows^T dqkv_rows is a partial sum, and the cp ranks must add
// them (an all-reduce over cp, as over dp) for the replicas to stay equal to one device.
struct CpTrainConfig {
  int cp = 2;
  CpAlgo algo = CpAlgo::kRing;
  CpSplit split = CpSplit::kZigzag;
  int steps = 10;
  bool sum_gradients = true;  // false: the bug "gradients not summed over cp"
  std::int64_t B = 2, T = 32, C = 32, n_head = 4;
  double lr = 0.5;
  std::uint64_t seed = 5;
};

struct CpTrainResult {
  std::vector<double> loss;   // per step, over the whole sequence
  std::vector<float> weight;  // rank 0's W after the last step
  int first_drift_step = 0;   // first step whose replica hashes differ (0: never)
  double replica_drift = 0;   // max |W(rank) - W(rank 0)| after the last step
};

CpTrainResult train_cp_attention(const CpTrainConfig& c);

}  // namespace mixpar::ch06

namespace mixpar::ch06 {

// A GPT (2 blocks, 4 heads, C 32, T 32) trained for a few AdamW steps with its sequence split
// over cp ranks (the model's attention through CpModelAttention), composed with dp (each dp
// rank its share of the batch) and tp (Megatron's split of every block), against the same
// model on one device: the gradients of the replicated parameters summed over dp x cp (the
// grid's dp-cp group) and averaged, the loss the mean over the same ranks.
struct CpGptConfig {
  GptConfig model{2, 4, 32, 32, 64};  // 2 blocks, 4 heads, 32 wide, 32 positions, 64 tokens
  std::int64_t B = 2, T = 32;
  int steps = 10;
  int dp = 1, tp = 1, cp = 1;
  bool sequence_parallel = false;
  CpAlgo algo = CpAlgo::kRing;
  CpSplit split = CpSplit::kZigzag;
  DType dtype = DType::kF32;
  std::uint64_t seed = 7;
  double lr = 1e-3;
};

struct CpGptResult {
  std::vector<double> loss, grad_norm;                 // per step, over the whole batch
  std::map<std::string, std::vector<float>> weights;   // full tensors after the last step
  double replica_drift = 0;  // max |difference| over the dp x cp replicas of any parameter
};

CpGptResult train_cp_gpt(const CpGptConfig& c);

double max_weight_difference(const CpGptResult& a, const CpGptResult& b);

}  // namespace mixpar::ch06
