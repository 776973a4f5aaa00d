// The measured memory bill: a fresh ledger per configuration (LedgerScope), one step, then the
// ledger's live bytes per category beside the calculator's numbers.
#include "memory_bill.h"

#include <initializer_list>
#include <string>

#include "model/mlp.h"
#include "tensor/ledger.h"

namespace mixpar::ch03 {
namespace {

std::int64_t live(const MemoryLedger& l, MemCategory c) {
  return static_cast<std::int64_t>(l.live(c));
}

MixedPrecisionConfig optimizer_config(mem::Precision p, mem::Optimizer o) {
  MixedPrecisionConfig m;
  m.optimizer = o == mem::Optimizer::kAdamW ? OptimizerKind::kAdamW : OptimizerKind::kSgd;
  m.sgd.momentum = 0.9;  // the calculator's "sgd" keeps one momentum buffer
  m.max_grad_norm = 1.0;
  m.scaler = p == mem::Precision::kFp16 ? ch02::pytorch_config() : ch02::no_scaling_config();
  return m;
}

// "a+b+c" (appending avoids GCC 12's -Wrestrict false positive on "x" + std::string).
std::string plus(std::initializer_list<std::string> parts) {
  std::string out;
  for (const std::string& p : parts) {
    if (!out.empty()) out += '+';
    out += p;
  }
  return out;
}

}  // namespace

std::int64_t mlp_activation_bytes(const std::vector<std::int64_t>& sizes, std::int64_t batch,
                                  DType dtype) {
  std::int64_t elems = sizes.front() + sizes.back();
  for (std::size_t i = 1; i + 1 < sizes.size(); ++i) elems += 2 * sizes[i];
  return batch * elems * static_cast<std::int64_t>(dtype_size(dtype));
}

MemoryBillRow measure_memory_bill(const ch02::StudentSetup& c, mem::Precision p, mem::Optimizer o) {
  MemoryLedger ledger;
  MemoryBillRow row;
  row.precision = p;
  row.optimizer = o;
  {
    const LedgerScope scope(ledger);  // every allocation below is charged to `ledger`
    Mlp model(ch02::student_config(c, mem::working_dtype(p)));
    const TeacherTask task(ch02::teacher_config(c));  // its teacher lives on the task's own ledger
    MixedPrecisionOptimizer opt(tensors_of(model.parameters()), tensors_of(model.gradients()),
                                optimizer_config(p, o));
    const Batch b = task.batch(0, c.batch);
    model.forward(b.x);
    model.backward(b, opt.loss_scale());
    opt.step();
    row.params = model.num_parameters();
    row.measured = {live(ledger, MemCategory::kParameters),
                    live(ledger, MemCategory::kGradients),
                    live(ledger, MemCategory::kMasterParams),
                    live(ledger, MemCategory::kOptimizerState),
                    live(ledger, MemCategory::kActivations),
                    live(ledger, MemCategory::kOther),
                    static_cast<std::int64_t>(ledger.peak(MemCategory::kOther))};
  }
  row.predicted = mem::model_states(row.params, p, o);
  row.fp32_grad_buffer = p == mem::Precision::kFp32 ? 0 : 4 * row.params;
  row.predicted_activations = mlp_activation_bytes(c.sizes, c.batch, mem::working_dtype(p));
  return row;
}

std::vector<MemoryBillRow> lesson_memory_bills(const ch02::StudentSetup& c) {
  std::vector<MemoryBillRow> rows;
  for (mem::Optimizer o : {mem::Optimizer::kAdamW, mem::Optimizer::kSgdMomentum}) {
    for (mem::Precision p : {mem::Precision::kFp32, mem::Precision::kFp16, mem::Precision::kBf16}) {
      rows.push_back(measure_memory_bill(c, p, o));
    }
  }
  return rows;
}

std::vector<Claim> memory_claims(const std::vector<MemoryBillRow>& rows) {
  std::vector<Claim> out;
  int activations_ok = 0;
  for (const MemoryBillRow& r : rows) {
    const MeasuredBytes& m = r.measured;
    const mem::ModelStates& p = r.predicted;
    const auto per = [&](std::int64_t b) { return std::to_string(b / r.params); };
    // params + grads + masters + optimizer state, in bytes per parameter.
    std::string grads = per(p.gradients);
    if (r.fp32_grad_buffer != 0) grads = plus({"(" + grads, per(r.fp32_grad_buffer) + ")"});
    const std::string want =
        plus({per(p.parameters), grads, per(p.master_params), per(p.optimizer_state)});
    const std::string got =
        plus({per(m.parameters), per(m.gradients), per(m.master_params), per(m.optimizer_state)});
    const bool exact = m.parameters == p.parameters && m.master_params == p.master_params &&
                       m.optimizer_state == p.optimizer_state &&
                       m.gradients == p.gradients + r.fp32_grad_buffer;
    out.push_back({std::string(mem::name(r.precision)) + " " + std::string(mem::name(r.optimizer)) +
                       ": ledger bytes == calculator (+ FP32 unscale buffer)",
                   want + " B/param", got + " B/param", exact});
    activations_ok += m.activations == r.predicted_activations ? 1 : 0;
  }
  const std::string n = std::to_string(rows.size());
  out.push_back({"activations == B x (in + 2 x hidden + out) x working bytes", n + " of " + n,
                 std::to_string(activations_ok) + " of " + n,
                 activations_ok == static_cast<int>(rows.size())});
  return out;
}

}  // namespace mixpar::ch03
