#include "ch09_expert_parallel/expert_dispatch.h"

#include <cstring>
#include <stdexcept>

namespace mixpar::ch09 {

const char* dispatch_name(DispatchKind d) {
  return d == DispatchKind::kAllToAll ? "all-to-all" : "all-gather";
}

float row_dot(const float* a, const float* b, std::int64_t C) {
  float s = 0;
  for (std::int64_t c = 0; c < C; ++c) s += a[c] * b[c];
  return s;
}

namespace {

std::vector<std::int64_t> times(const std::vector<std::int64_t>& v, std::int64_t w) {
  std::vector<std::int64_t> out;
  for (std::int64_t x : v) out.push_back(x * w);
  return out;
}

void copy_row(float* dst, const float* src, std::int64_t C) {
  std::memcpy(dst, src, sizeof(float) * static_cast<std::size_t>(C));
}

}  // namespace

AllToAllPlan plan_all_to_all(const Permutation& p, std::int64_t width, Communicator& ep) {
  const int n = ep.size();
  const int E = p.n_experts, El = E / n;
  AllToAllPlan plan;
  plan.width = width;
  // Counts first: block q of my counts (experts q El .. q El + El - 1) goes to rank q.
  Tensor mine = Tensor::empty({E}, DType::kF64, MemCategory::kCommBuffers);
  for (int e = 0; e < E; ++e) mine.data_as<double>()[e] = double(p.counts[std::size_t(e)]);
  Tensor theirs = Tensor::empty({E}, DType::kF64, MemCategory::kCommBuffers);
  const std::vector<std::int64_t> blocks(static_cast<std::size_t>(n), El);
  ep.all_to_all(mine, blocks, theirs, blocks);
  const double* from = theirs.data_as<double>();  // [source][local expert]
  for (int q = 0; q < n; ++q) {
    std::int64_t to = 0, got = 0;
    for (int e = 0; e < El; ++e) {
      to += p.counts[std::size_t(q * El + e)];
      got += static_cast<std::int64_t>(from[q * El + e]);
    }
    plan.rows_to.push_back(to);
    plan.rows_from.push_back(got);
  }
  // Received rows come [source][local expert]; the experts want [local expert][source].
  std::vector<std::int64_t> start(static_cast<std::size_t>(n * El));  // received row of block
  std::int64_t at = 0;
  for (int s = 0; s < n; ++s) {
    for (int e = 0; e < El; ++e) {
      start[std::size_t(s * El + e)] = at;
      at += static_cast<std::int64_t>(from[s * El + e]);
    }
  }
  plan.offsets.assign(1, 0);
  for (int e = 0; e < El; ++e) {
    for (int s = 0; s < n; ++s) {
      const auto count = static_cast<std::int64_t>(from[s * El + e]);
      for (std::int64_t i = 0; i < count; ++i) plan.order.push_back(start[std::size_t(s * El + e)] + i);
    }
    plan.offsets.push_back(static_cast<std::int64_t>(plan.order.size()));
  }
  return plan;
}

void all_to_all_dispatch(const Tensor& local, const AllToAllPlan& plan, Communicator& ep,
                         Tensor& expert_rows) {
  const std::int64_t C = plan.width;
  Tensor received = Tensor::empty({std::int64_t(plan.order.size()), C}, DType::kF32,
                                  MemCategory::kCommBuffers);
  Tensor flat = received.view({received.numel()});
  ep.all_to_all(local.view({local.numel()}), times(plan.rows_to, C), flat,
                times(plan.rows_from, C));
  const float* in = received.data_as<float>();
  float* out = expert_rows.data_as<float>();
  for (std::size_t i = 0; i < plan.order.size(); ++i) {
    copy_row(out + std::int64_t(i) * C, in + plan.order[i] * C, C);
  }
}

void all_to_all_return(const Tensor& expert_rows, const AllToAllPlan& plan, Communicator& ep,
                       Tensor& local) {
  const std::int64_t C = plan.width;
  Tensor back = Tensor::empty({std::int64_t(plan.order.size()), C}, DType::kF32,
                              MemCategory::kCommBuffers);
  const float* in = expert_rows.data_as<float>();
  float* out = back.data_as<float>();
  for (std::size_t i = 0; i < plan.order.size(); ++i) {
    copy_row(out + plan.order[i] * C, in + std::int64_t(i) * C, C);
  }
  Tensor flat = local.view({local.numel()});
  ep.all_to_all(back.view({back.numel()}), times(plan.rows_from, C), flat, times(plan.rows_to, C));
}

AllGatherPlan plan_all_gather(const Routing& r, const std::vector<char>& keep, int first_expert,
                              int local_experts, Communicator& ep) {
  const int n = ep.size();
  const std::int64_t A = r.tokens * r.k;
  // Expert index (exact in FP32), kept flag and gate of each assignment, gathered at once.
  Tensor mine = Tensor::empty({3 * A}, DType::kF32, MemCategory::kCommBuffers);
  float* m = mine.data_as<float>();
  for (std::int64_t a = 0; a < A; ++a) {
    m[a] = float(r.expert[std::size_t(a)]);
    m[A + a] = keep[std::size_t(a)] ? 1.0f : 0.0f;
    m[2 * A + a] = r.gate[std::size_t(a)];
  }
  Tensor all = Tensor::empty({3 * A * n}, DType::kF32, MemCategory::kCommBuffers);
  ep.all_gather(mine, all);  // throws if the ranks' token counts differ
  const float* g = all.data_as<float>();
  AllGatherPlan plan;
  plan.tokens = r.tokens;
  plan.k = r.k;
  plan.row_of.assign(static_cast<std::size_t>(A * n), -1);
  plan.gate.resize(static_cast<std::size_t>(A * n));
  for (int s = 0; s < n; ++s) {
    for (std::int64_t a = 0; a < A; ++a) plan.gate[std::size_t(s * A + a)] = g[3 * A * s + 2 * A + a];
  }
  plan.offsets.assign(1, 0);
  for (int e = 0; e < local_experts; ++e) {
    for (int s = 0; s < n; ++s) {
      const float* blk = g + 3 * A * s;
      for (std::int64_t a = 0; a < A; ++a) {  // token order, as the all-to-all's rows
        if (blk[A + a] == 0.0f || int(blk[a]) != first_expert + e) continue;
        plan.row_of[std::size_t(s * A + a)] = static_cast<std::int64_t>(plan.source.size());
        plan.source.push_back(s * A + a);
      }
    }
    plan.offsets.push_back(static_cast<std::int64_t>(plan.source.size()));
  }
  return plan;
}

void all_gather_dispatch(const Tensor& local, const AllGatherPlan& plan, Communicator& ep,
                         bool weighted, Tensor& gathered, Tensor& expert_rows) {
  const std::int64_t C = local.dim(1);
  gathered = Tensor::empty({plan.tokens * ep.size(), C}, DType::kF32, MemCategory::kCommBuffers);
  Tensor flat = gathered.view({gathered.numel()});
  ep.all_gather(local.view({local.numel()}), flat);
  const float* in = gathered.data_as<float>();
  float* out = expert_rows.data_as<float>();
  for (std::size_t i = 0; i < plan.source.size(); ++i) {
    const std::int64_t a = plan.source[i], token = a / plan.k;
    const float w = plan.gate[std::size_t(a)];
    for (std::int64_t c = 0; c < C; ++c) {
      out[std::int64_t(i) * C + c] = weighted ? w * in[token * C + c] : in[token * C + c];
    }
  }
}

void all_gather_combine(const Tensor& expert_rows, const AllGatherPlan& plan, Communicator& ep,
                        bool weighted, Tensor& local) {
  const std::int64_t C = local.dim(1), T = plan.tokens * ep.size();
  Tensor partial = Tensor::zeros({T, C}, DType::kF32, MemCategory::kCommBuffers);
  const float* in = expert_rows.data_as<float>();
  float* out = partial.data_as<float>();
  for (std::int64_t t = 0; t < T; ++t) {
    bool first = true;
    for (int j = 0; j < plan.k; ++j) {
      const std::size_t a = static_cast<std::size_t>(t * plan.k + j);
      const std::int64_t row = plan.row_of[a];
      if (row < 0) continue;
      for (std::int64_t c = 0; c < C; ++c) {
        const float term = weighted ? plan.gate[a] * in[row * C + c] : in[row * C + c];
        out[t * C + c] = first ? term : out[t * C + c] + term;
      }
      first = false;
    }
  }
  Tensor flat = local.view({local.numel()});
  ep.reduce_scatter(partial.view({partial.numel()}), flat);
}

std::vector<float> all_gather_gate_grads(const Tensor& dy_gathered, const Tensor& expert_out,
                                         const AllGatherPlan& plan, Communicator& ep) {
  const std::int64_t C = dy_gathered.dim(1), A = plan.tokens * plan.k;
  Tensor partial = Tensor::zeros({A * ep.size()}, DType::kF32, MemCategory::kCommBuffers);
  for (std::size_t i = 0; i < plan.source.size(); ++i) {
    const std::int64_t a = plan.source[i];
    partial.data_as<float>()[a] = row_dot(dy_gathered.data_as<float>() + (a / plan.k) * C,
                                          expert_out.data_as<float>() + std::int64_t(i) * C, C);
  }
  Tensor mine = Tensor::empty({A}, DType::kF32, MemCategory::kCommBuffers);
  ep.reduce_scatter(partial, mine);
  return mine.to_floats();
}

}  // namespace mixpar::ch09
