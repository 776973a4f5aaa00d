// Every input and output a run will need, checked before step 1: a path that cannot be
// written or a prompt the model cannot read would otherwise be found after the last step,
// and the run's result lost with it. Each failure is an InputError naming the flag.
#pragma once

#include "trainer_config.h"
#include "training_data.h"

namespace mixpar::ch08 {

// The sizes a run derives from its flags, each formed in checked arithmetic
// (common/util/checked_math.h): rows and tokens of a micro-batch, of one read of the data
// over all replicas and of an optimizer step, and the largest activations of a micro-batch
// (logits, attention scores, the blocks' inputs). An overflow is an InputError naming the
// flags, before anything is allocated.
void check_derived_sizes(const TrainerConfig& c);

// A path flag given as "" (--data "", --checkpoint-dir "", --trace "", ...) is refused rather
// than read as "not given", which would fall back to a default the user did not ask for.
void refuse_empty_paths(const ArgParser& a);

// Rank 0's outputs: --save (a directory, created if missing), --log-jsonl, --trace and
// --dump-logits (files whose directory exists). Each is probed by creating and removing a
// file where it will be written (permissions alone do not say: root passes access(2) on a
// read-only file system or under /proc). A fresh run refuses an existing --log-jsonl
// (--resume appends to it), as it refuses a --checkpoint-dir that holds checkpoints.
void check_outputs(const TrainerConfig& c);
// The part of check_outputs that writes nothing: every output path resolved (through links
// and "..") and compared with every other, with this run's --checkpoint-dir and --save
// directories, and with the checkpoints above --checkpoint-dir; InputError naming both when
// two collide or one lies inside a checkpoint (fuzz/fuzz_tool_flags.cpp runs it).
void check_output_plan(const TrainerConfig& c);

// What evaluation, sampling and --dump-logits will feed the model: --prompt's bytes inside
// the vocabulary, and the held-out problems of the built-in dataset (with the newline that
// starts each) shorter than the context, so the completions have room.
void check_prompts(const TrainerConfig& c, const TrainingData& data);

// One optimizer step reads --grad-accum windows of dp x B x T tokens from the data; a step
// that would read more windows than the data holds (the same window several times in one
// step) is refused before any work: --grad-accum 100000000 on the built-in data was accepted
// and printed nothing for minutes.
void check_step_fits_the_data(const TrainerConfig& c, const TrainingData& data);

// --resume: the checkpoint `latest` names, checked as Trainer::resume() checks it before it
// reads a tensor (manifest, sizes and checksums; the state's own numbers; --steps not below
// its step; the learning-rate schedule unchanged; layout, run identity and data), so that a
// resume that cannot work is refused before the pre-flight lines and any compute. Defined in
// trainer_state.cpp, beside resume().
void check_resume_checkpoint(const TrainerConfig& c, const TrainingData& data);

}  // namespace mixpar::ch08
