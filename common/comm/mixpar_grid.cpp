// mixpar-grid: how a world of ranks is laid out as a dp x tp x pp grid (x cp with --cp, the
// context-parallel degree: then the cp and dp-cp groups too). Prints every rank's
// coordinates and the members of each of its groups (tp, dp, pp, model-parallel, embedding)
// and its pipeline neighbours; --json prints the same for scripts, each group listed once.
// All arithmetic is parallel_grid.h's. Bad flags or a shape that does not fill the world:
// one-line error, exit code 2, nothing on stdout (mixpar_grid_flags.cpp).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "comm/mixpar_grid_flags.h"
#include "comm/parallel_grid.h"
#include "util/errors.h"
#include "util/json.h"

namespace {

using namespace mixpar;

// {0,4} -> "0,4"; {} -> "-".
std::string list(const std::vector<int>& ranks) {
  if (ranks.empty()) return "-";
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ",") + std::to_string(r);
  return s;
}

std::string neighbour(int r) { return r < 0 ? "-" : std::to_string(r); }

void print_table(const GridShape& shape) {
  // With cp > 1 the cp coordinate and the cp and dp-cp groups join the table.
  const bool cp = shape.cp > 1;
  std::vector<std::string> head = {"rank", "dp", "tp"};
  if (cp) head.push_back("cp");
  for (const char* h : {"pp", "tp group", "dp group"}) head.push_back(h);
  if (cp) {
    head.push_back("cp group");
    head.push_back("dp-cp group");
  }
  for (const char* h : {"pp group", "model-parallel", "embedding", "prev", "next"}) {
    head.push_back(h);
  }
  std::vector<std::vector<std::string>> rows;
  for (int r = 0; r < shape.world(); ++r) {
    const GridCoord c = grid_coord(shape, r);
    std::vector<std::string> row = {std::to_string(r), std::to_string(c.dp), std::to_string(c.tp)};
    if (cp) row.push_back(std::to_string(c.cp));
    row.push_back(std::to_string(c.pp));
    row.push_back(list(tp_group(shape, r)));
    row.push_back(list(dp_group(shape, r)));
    if (cp) {
      row.push_back(list(cp_group(shape, r)));
      row.push_back(list(dp_cp_group(shape, r)));
    }
    for (const std::string& cell :
         {list(pp_group(shape, r)), list(model_parallel_group(shape, r)),
          list(embedding_group(shape, r)), neighbour(pp_prev(shape, r)),
          neighbour(pp_next(shape, r))}) {
      row.push_back(cell);
    }
    rows.push_back(std::move(row));
  }
  const std::size_t first_group = cp ? 5 : 4, last_group = head.size() - 3;
  std::vector<std::size_t> width(head.size());
  for (std::size_t i = 0; i < head.size(); ++i) {
    width[i] = head[i].size();
    for (const auto& row : rows) width[i] = std::max(width[i], row[i].size());
  }
  // Numbers right-aligned, group lists left-aligned; two spaces between columns.
  const auto print_row = [&](const std::vector<std::string>& cells) {
    std::string line;
    for (std::size_t i = 0; i < cells.size(); ++i) {
      const std::string pad(width[i] - cells[i].size(), ' ');
      const bool left = i >= first_group && i <= last_group;
      if (i > 0) line += "  ";
      line += left ? cells[i] + pad : pad + cells[i];
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    std::printf("%s\n", line.c_str());
  };
  if (cp) {
    std::printf("mixpar-grid: dp %d x tp %d x cp %d x pp %d = %d ranks\n\n", shape.dp, shape.tp,
                shape.cp, shape.pp, shape.world());
  } else {
    std::printf("mixpar-grid: dp %d x tp %d x pp %d = %d ranks\n\n", shape.dp, shape.tp,
                shape.pp, shape.world());
  }
  print_row(head);
  for (const auto& row : rows) print_row(row);
  if (cp) {
    std::printf(
        "\nrank = ((pp x %d + dp) x %d + cp) x %d + tp: tp fastest, then cp, dp, pp outermost "
        "(prev/next: pipeline neighbours, - at the ends);\ngradients of the parameters are "
        "summed over the dp-cp group (cp ranks hold the same parameters, other rows)\n",
        shape.dp, shape.cp, shape.tp);
  } else {
    std::printf(
        "\nrank = (pp x %d + dp) x %d + tp: tp fastest, then dp, pp outermost "
        "(prev/next: pipeline neighbours, - at the ends)\n",
        shape.dp, shape.tp);
  }
}

Json to_json(const std::vector<int>& ranks) {
  Json a = Json::array();
  for (int r : ranks) a.push_back(r);
  return a;
}

// Every group of one kind once, ordered by its first member (= the first rank meeting it).
template <class GroupOf>
Json groups(const GridShape& shape, GroupOf&& group_of) {
  Json out = Json::array();
  for (int r = 0; r < shape.world(); ++r) {
    const std::vector<int> g = group_of(shape, r);
    if (!g.empty() && g.front() == r) out.push_back(to_json(g));
  }
  return out;
}

void print_json(const GridShape& shape) {
  Json s = Json::object();
  s.set("world", shape.world());
  s.set("dp", shape.dp);
  s.set("tp", shape.tp);
  s.set("pp", shape.pp);
  if (shape.cp > 1) s.set("cp", shape.cp);  // the 3D grid's JSON stays as it was
  Json ranks = Json::array();
  for (int r = 0; r < shape.world(); ++r) {
    const GridCoord c = grid_coord(shape, r);
    Json j = Json::object();
    j.set("rank", r);
    j.set("dp", c.dp);
    j.set("tp", c.tp);
    j.set("pp", c.pp);
    if (shape.cp > 1) j.set("cp", c.cp);
    j.set("prev", pp_prev(shape, r));
    j.set("next", pp_next(shape, r));
    j.set("first_stage", is_first_stage(shape, r));
    j.set("last_stage", is_last_stage(shape, r));
    ranks.push_back(std::move(j));
  }
  Json g = Json::object();
  g.set("tp", groups(shape, tp_group));
  g.set("dp", groups(shape, dp_group));
  g.set("pp", groups(shape, pp_group));
  g.set("model_parallel", groups(shape, model_parallel_group));
  g.set("embedding", groups(shape, embedding_group));
  if (shape.cp > 1) {
    g.set("cp", groups(shape, cp_group));
    g.set("dp_cp", groups(shape, dp_cp_group));
  }
  Json out = Json::object();
  out.set("shape", std::move(s));
  out.set("ranks", std::move(ranks));
  out.set("groups", std::move(g));
  std::printf("%s\n", out.dump(2).c_str());
}

int run(int argc, char** argv) {
  const MixparGridFlags q = parse_mixpar_grid_flags(argc, argv);
  if (q.json) {
    print_json(q.shape);
  } else {
    print_table(q.shape);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return mixpar::run_main(argc, argv, run); }
