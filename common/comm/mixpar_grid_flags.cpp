#include "comm/mixpar_grid_flags.h"

#include <cstdint>
#include <string>

#include "util/cli.h"
#include "util/errors.h"

namespace mixpar {
namespace {

// The table has one row per rank and lists whole groups: beyond this it stops being readable.
constexpr std::int64_t kMaxWorld = 4096;

ArgParser make_parser() {
  ArgParser a("mixpar-grid",
              "The rank grid of 3D parallelism: each rank's (dp, tp, pp) coordinates, the\n"
              "members of its tp, dp, pp, model-parallel and embedding groups, and its\n"
              "pipeline neighbours, in Megatron's order:\n"
              "rank = (pp x dp_size + dp) x tp_size + tp; with --cp (context parallelism,\n"
              "tp-cp-dp-pp): ((pp x dp_size + dp) x cp_size + cp) x tp_size + tp.");
  a.option("world", "", "number of ranks (default: dp x tp x pp)")
      .option("dp", "1", "data-parallel degree")
      .option("tp", "1", "tensor-parallel degree")
      .option("pp", "1", "pipeline-parallel degree (stages)")
      .option("cp", "1", "context-parallel degree (ranks sharing one sequence)")
      .flag("json", "print the grid as JSON instead of a table");
  return a;
}

int read_degree(const ArgParser& a, const char* name) {
  const std::int64_t v = a.get_int(name);
  if (v < 1) throw InputError(std::string("--") + name + " must be >= 1, got " + a.get(name));
  if (v > kMaxWorld) {
    throw InputError(std::string("--") + name + " " + a.get(name) + ": mixpar-grid lays out " +
                     "at most " + std::to_string(kMaxWorld) + " ranks");
  }
  return static_cast<int>(v);
}

}  // namespace

MixparGridFlags parse_mixpar_grid_flags(int argc, char** argv) {
  ArgParser a = make_parser();
  a.parse(argc, argv);
  MixparGridFlags q;
  q.shape.dp = read_degree(a, "dp");
  q.shape.tp = read_degree(a, "tp");
  q.shape.pp = read_degree(a, "pp");
  q.shape.cp = read_degree(a, "cp");
  const std::int64_t product = std::int64_t{q.shape.dp} * q.shape.tp * q.shape.pp * q.shape.cp;
  if (a.given("world")) {
    q.world = read_degree(a, "world");
  } else if (product > kMaxWorld) {
    throw InputError(mesh_text(q.shape.dims()) + " = " + std::to_string(product) +
                     " ranks: mixpar-grid lays out at most " + std::to_string(kMaxWorld));
  } else {
    q.world = static_cast<int>(product);
  }
  validate(q.shape, q.world);
  q.json = a.get_flag("json");
  return q;
}

}  // namespace mixpar
