// build/bin/train_gpt: trains a GPT-2 on CPU, on one device or a dp x tp x pp grid (ZeRO 1-3
// over dp) of --ranks N threads or mpirun's processes (see README.md). Flags are trainer_config.cpp's; the run is
// train_loop.cpp's. Bad input: one line, exit 2.
#include <cstdio>
#include <cstdlib>
#include <new>
#include <optional>
#include <string>

#include "ops/compute_threads.h"
#include "train_loop.h"
#include "trainer.h"
#include "trainer_config.h"
#include "util/errors.h"

#if defined(MIXPAR_HAVE_MPI)
#include <mpi.h>

#include "comm/mpi_backend.h"
#include "comm/parallel_grid.h"
#endif

namespace mixpar::ch08 {
namespace {

#if defined(MIXPAR_HAVE_MPI)
// Ranks of the job on this machine (they share its cores).
int ranks_on_this_node() {
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int n = 1;
  MPI_Comm_size(node, &n);
  MPI_Comm_free(&node);
  return n;
}

// One rank of an mpirun job. A bad input found before the first step (flags, data, checkpoint,
// world size) is reported once, by the lowest rank that found it, and every rank exits 2 after
// leaving MPI cleanly (agree_on_setup). A failure after that, or any internal error, ends the
// whole job with MPI_Abort: the other ranks wait in a collective that will never complete.
int run_mpi_rank(TrainerConfig config, const ArgParser& args, int* argc, char*** argv) {
  MpiSession session(argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::optional<MpiCommunicator> comm;
  bool training = false;
  try {
    MpiOptions opts;
    opts.watchdog_seconds = config.comm_timeout;
    comm.emplace(MPI_COMM_WORLD, opts);
    // The first collective of every process, whatever its flags: a process whose own command
    // line was refused (MPMD, `mpirun -np 1 A : -np 1 B`) votes here from
    // report_bad_flags_once, and every process stops with its reason instead of waiting in
    // different collectives.
    if (!agree_on_setup(*comm, "")) return kExitInputError;
    set_world_size(config, comm->size(), args.given("dp"), args.given("ranks"));
    // The watchdog names this process's place in the grid beside its world rank.
    if (config.dp * config.tp * config.pp * config.cp == comm->size()) {
      const GridCoord g = grid_coord(GridShape{.dp = static_cast<int>(config.dp),
                                               .tp = static_cast<int>(config.tp),
                                               .pp = static_cast<int>(config.pp),
                                               .cp = static_cast<int>(config.cp)},
                                     rank);
      comm->set_identity("dp " + std::to_string(g.dp) + ", tp " + std::to_string(g.tp) + ", pp " +
                         std::to_string(g.pp) +
                         (config.cp > 1 ? ", cp " + std::to_string(g.cp) : std::string()));
    }
    return run_training_rank(config, *comm, ranks_on_this_node(), stdout,
                             [&training] { training = true; });
  } catch (const ReportedInputError&) {
    return kExitInputError;
  } catch (const InputError& e) {
    // Before training, every rank reaches here with the same error (the same flags, files and
    // checkpoint): agree, one message, exit 2. (A rank failing alone meets the others in
    // another collective instead: the communicator reports the mismatch and the job aborts.)
    if (!training && comm) {
      agree_on_setup(*comm, e.what());
      return kExitInputError;
    }
    std::fprintf(stderr, "train_gpt: rank %d: error: %s\n", rank, one_line(e.what()).c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, kExitInputError);
  } catch (const RunHalted& e) {
    // Every rank halts at the same step (the loss is the global batch's): one message, exit 3.
    if (rank == 0) {
      std::fprintf(stderr, "train_gpt: halted: %s\n", one_line(e.what()).c_str());
      std::fflush(stderr);
    }
    return kExitRunHalted;
  } catch (const std::bad_alloc&) {
    // The input asked for more memory than this machine has: the user's, not a bug (exit 2).
    std::fprintf(stderr,
                 "train_gpt: rank %d: error: out of memory (std::bad_alloc): the run asks for "
                 "more memory than this machine can allocate\n",
                 rank);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, kExitInputError);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_gpt: rank %d: internal error: %s\n", rank,
                 one_line(e.what()).c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return 1;  // MPI_Abort does not return
}

// The rank a launcher gave this process, from its environment (Open MPI, PMIx, MPICH's PMI);
// -1 outside one: a bad flag under mpirun is reported once, not once per process.
int launcher_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"}) {
    if (const char* v = std::getenv(name)) return std::atoi(v);
  }
  return -1;
}

// A bad flag under mpirun: usually every process parsed the same command line and found the
// same error; under MPMD only some did. The lowest such rank prints its reason, every process
// exits 2: this vote is the first collective of run_mpi_rank's processes too.
int report_bad_flags_once(const std::string& message, int* argc, char*** argv) {
  MpiSession session(argc, argv);
  MpiCommunicator comm;
  agree_on_setup(comm, message);
  return kExitInputError;
}
#endif

int run(int argc, char** argv) {
  ArgParser args = make_trainer_args();
  TrainerConfig config;
  try {
    args.parse(argc, argv);
    config = trainer_config_from_args(args);
  } catch (const InputError& e) {
#if defined(MIXPAR_HAVE_MPI)
    if (launcher_rank() >= 0) return report_bad_flags_once(e.what(), &argc, &argv);
#endif
    throw;
  }
  ops::set_compute_threads(config.threads);
  if (config.backend == CommBackend::kMpi) {
#if defined(MIXPAR_HAVE_MPI)
    return run_mpi_rank(config, args, &argc, &argv);
#else
    throw InputError(
        "--backend mpi: this train_gpt was built without MPI (install an MPI such as Debian's "
        "libopenmpi-dev and reconfigure), or use --backend local --ranks N");
#endif
  }
  return run_training(config, stdout);
}

}  // namespace
}  // namespace mixpar::ch08

int main(int argc, char** argv) { return mixpar::run_main(argc, argv, mixpar::ch08::run); }
