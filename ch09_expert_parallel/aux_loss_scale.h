// How the auxiliary losses' gradients are scaled: the rule, stated once.
//
// The aux loss and the z-loss are terms of the loss the optimizer minimises, so their
// gradients take exactly the main loss's factors:
//   seed = coef x loss_scale / micro_batches
// - divided by the number of accumulated micro-batches, as the main loss is (chapter 7's
//   loss-not-divided bug, here for the aux term: undivided, balancing weighs M times more
//   than configured);
// - multiplied by the loss scale (chapter 2), or the unscaling step shrinks it by S;
// - not multiplied by the tp (or cp) size: the statistics are reduced over the ranks that
//   share the tokens and each rank differentiates only its own tokens with the group's T
//   (load_balance.h); dividing by a rank's local token count instead makes every token's
//   gradient tp times too large.
// Data parallelism needs nothing more: the dp average of the gradients divides the dp copies
// of the loss as it divides the main loss's.
#pragma once

namespace mixpar::ch09 {

struct LossFactors {
  float loss_scale = 1.0f;  // chapter 2's S (1 for bf16)
  int micro_batches = 1;    // M accumulated before a step
};

inline float aux_grad_seed(double coef, const LossFactors& f) {
  return static_cast<float>(coef * double(f.loss_scale) / double(f.micro_batches));
}

}  // namespace mixpar::ch09
