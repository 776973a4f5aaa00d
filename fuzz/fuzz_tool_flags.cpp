// Every command-line tool's and chapter demo's flag checks. Each program reads and checks all
// of its flags in one library function before it prints or computes anything (the chapters'
// *_flags.cpp, common/comm/mixpar_grid_flags.cpp, and train_gpt's trainer_config.cpp); this
// harness calls that function as the program's main does. The first byte of the input picks
// the program ('a' + its index in kPrograms below: 'a' fpx, 'b' ch01_fp_formats, ...,
// 'k' train_gpt, 'l' ch09_expert_parallel; any byte picks one), the rest is split at newlines
// into its argv. Any outcome but success or an InputError is a finding; so is a value accepted
// outside what the program then relies on. ("--help" prints and exits, by design: such
// arguments are dropped.)
//
// bench_gpu_gpt is not here: it reads its flags only on a machine with a GPU, in its CUDA-only
// part, some of them after its first measurement.
#include <cstdint>
#include <functional>
#include <set>
#include <string>

#include "ch01_fp_formats/fp_formats_demo_flags.h"
#include "ch01_fp_formats/fpx_flags.h"
#include "ch02_loss_scaling/loss_scaling_demo_flags.h"
#include "ch03_master_weights/master_weights_demo_flags.h"
#include "ch03_master_weights/mixpar_mem_flags.h"
#include "ch04_ddp/ddp_demo_flags.h"
#include "ch05_zero/zero_demo_flags.h"
#include "ch06_tensor_parallel/tp_demo_flags.h"
#include "ch07_pipeline/pipeline_demo_flags.h"
#include "ch08_full_3d/config_agreement.h"
#include "ch08_full_3d/run_checks.h"
#include "ch08_full_3d/trainer_config.h"
#include "ch09_expert_parallel/moe_demo_flags.h"
#include "comm/mixpar_grid_flags.h"
#include "fuzz_util.h"

namespace {

using namespace mixpar;

void mixpar_mem(int argc, char** argv) {
  const mem::MixparMemFlags f = mem::parse_mixpar_mem_flags(argc, argv);
  // What mixpar-mem does next with a setup its flags accepted: the bill's byte counts are
  // exact int64s, and one that would overflow is an InputError too.
  const mem::MemoryBill bill = mem::compute_bill(f.setup);
  (void)mem::bill_notes(f.setup, bill);
}

void mixpar_grid(int argc, char** argv) {
  const MixparGridFlags f = parse_mixpar_grid_flags(argc, argv);
  fuzz::require(f.shape.world() == f.world && f.world >= 1 && f.world <= 4096,
                "mixpar-grid accepted a grid that does not fill a world of 1..4096 ranks");
}

// train_gpt's flags, then what its start-up checks before any work and without writing:
// the output plan (every output path resolved and compared with every other and with the
// checkpoints; ch08_full_3d/run_checks.h) and the fields the MPI ranks agree on
// (config_agreement.h): every field named after its flag, none twice, none of the
// rank-local flags, and the same fields for the same flags parsed again.
void train_gpt(int argc, char** argv) {
  ArgParser args = ch08::make_trainer_args();
  args.parse(argc, argv);
  const ch08::TrainerConfig c = ch08::trainer_config_from_args(args);
  ch08::check_output_plan(c);
  const auto fields = ch08::agreement_fields(c, 0);
  std::set<std::string> names;
  for (const auto& [name, value] : fields) {
    fuzz::require(name.rfind("--", 0) == 0, "an agreement field is not named after its flag");
    fuzz::require(names.insert(name).second, "an agreement field appears twice");
  }
  for (const auto& [flag, why] : ch08::rank_local_flags()) {
    fuzz::require(names.count(flag) == 0, "a rank-local flag is also agreed");
  }
  ArgParser again = ch08::make_trainer_args();
  again.parse(argc, argv);
  fuzz::require(ch08::agreement_fields(ch08::trainer_config_from_args(again), 0) == fields,
                "the same flags gave other agreement fields");
}

struct Program {
  const char* name;
  std::function<void(int, char**)> parse;
};

const Program kPrograms[] = {
    {"fpx", [](int c, char** v) { (void)ch01::parse_fpx_flags(c, v); }},
    {"ch01_fp_formats", [](int c, char** v) { (void)ch01::parse_fp_formats_demo_flags(c, v); }},
    {"ch02_loss_scaling", [](int c, char** v) { (void)ch02::parse_loss_scaling_demo_flags(c, v); }},
    {"ch03_master_weights",
     [](int c, char** v) { (void)ch03::parse_master_weights_demo_flags(c, v); }},
    {"mixpar-mem", mixpar_mem},
    {"ch04_ddp", [](int c, char** v) { (void)ch04::parse_ddp_demo_flags(c, v); }},
    {"ch05_zero", [](int c, char** v) { (void)ch05::parse_zero_demo_flags(c, v); }},
    {"ch06_tensor_parallel", [](int c, char** v) { (void)ch06::parse_tp_demo_flags(c, v); }},
    {"ch07_pipeline", [](int c, char** v) { (void)ch07::parse_pipeline_demo_flags(c, v); }},
    {"mixpar-grid", mixpar_grid},
    {"train_gpt", train_gpt},
    {"ch09_expert_parallel", [](int c, char** v) { (void)ch09::parse_moe_demo_flags(c, v); }},
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::size_t count = sizeof(kPrograms) / sizeof(kPrograms[0]);
  const Program& program = kPrograms[static_cast<std::uint8_t>(data[0] - 'a') % count];
  fuzz::CommandLine cl(program.name, fuzz::text(data + 1, size - 1));
  fuzz::expect_only_input_errors([&] { program.parse(cl.argc(), cl.argv()); });
  return 0;
}
