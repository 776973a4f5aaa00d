// mixpar-grid: how a world of ranks is laid out as a dp x tp x pp grid (x cp with --cp, the
// context-parallel degree: then the cp and dp-cp groups too). Prints every rank's
// coordinates and the members of each of its groups (tp, dp, pp, model-parallel, embedding)
// and its pipeline neighbours; --json prints the same for scripts, each group listed once.
// All arithmetic is the mesh's (device_mesh.h, parallel_grid.h): the columns of coordinates
// and the formula are read from its dimensions. Bad flags or a shape that does not fill the world:
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

// The columns of group members, in the table's order: each a group of parallel_grid.h by the
// dimensions it spans (none: the embedding group), shown when `needs` is "" or > 1.
struct GroupColumn {
  const char* head;  // the table's
  const char* key;   // the JSON's
  std::vector<std::string> dims;
  const char* needs = "";
};

const std::vector<GroupColumn>& group_columns() {
  static const std::vector<GroupColumn> columns = {
      {"tp group", "tp", {"tp"}},
      {"dp group", "dp", {"dp"}},
      {"cp group", "cp", {"cp"}, "cp"},
      {"dp-cp group", "dp_cp", {"dp", "cp"}, "cp"},
      {"pp group", "pp", {"pp"}},
      {"model-parallel", "model_parallel", {"pp", "tp"}},
      {"embedding", "embedding", {}},
  };
  return columns;
}

bool shown(const DeviceMesh& m, const GroupColumn& g) { return *g.needs == '\0' || m.size(g.needs) > 1; }

std::vector<int> members(const DeviceMesh& m, const GroupColumn& g, int r) {
  return g.dims.empty() ? embedding_group(GridShape::of(m), r) : m.group(r, g.dims);
}

// "((pp x 2 + dp) x 2 + cp) x 2 + tp: tp fastest, then cp, dp, pp outermost": the rank formula
// over the shown dimensions, outermost first.
std::string formula(const DeviceMesh& m) {
  std::vector<MeshDim> dims;
  for (const MeshDim& d : m.dims()) {
    if (d.named_at_one || d.size > 1) dims.push_back(d);
  }
  std::string expr = dims.front().name;
  for (std::size_t i = 1; i < dims.size(); ++i) {
    expr = (i > 1 ? "(" + expr + ")" : expr) + " x " + std::to_string(dims[i].size) + " + " +
           dims[i].name;
  }
  std::string order = dims.back().name + " fastest, then ";
  for (std::size_t i = dims.size() - 1; i-- > 1;) order += dims[i].name + ", ";
  return "rank = " + expr + ": " + order + dims.front().name + " outermost";
}

void print_table(const DeviceMesh& mesh) {
  // The coordinates of every dimension the mesh's text names, then the groups.
  std::vector<std::string> head = {"rank"};
  for (const MeshDim& d : mesh.shown()) head.push_back(d.name);
  const std::size_t first_group = head.size();
  for (const GroupColumn& g : group_columns()) {
    if (shown(mesh, g)) head.push_back(g.head);
  }
  const std::size_t last_group = head.size() - 1;
  head.push_back("prev");
  head.push_back("next");
  std::vector<std::vector<std::string>> rows;
  for (int r = 0; r < mesh.world(); ++r) {
    std::vector<std::string> row = {std::to_string(r)};
    for (const MeshDim& d : mesh.shown()) row.push_back(std::to_string(mesh.coord(r, d.name)));
    for (const GroupColumn& g : group_columns()) {
      if (shown(mesh, g)) row.push_back(list(members(mesh, g, r)));
    }
    const GridShape shape = GridShape::of(mesh);
    row.push_back(neighbour(pp_prev(shape, r)));
    row.push_back(neighbour(pp_next(shape, r)));
    rows.push_back(std::move(row));
  }
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
  std::printf("mixpar-grid: %s = %d ranks\n\n", mesh.str().c_str(), mesh.world());
  print_row(head);
  for (const auto& row : rows) print_row(row);
  std::printf("\n%s (prev/next: pipeline neighbours, - at the ends)", formula(mesh).c_str());
  if (mesh.size("cp") > 1) {
    std::printf(
        ";\ngradients of the parameters are summed over the dp-cp group (cp ranks hold the "
        "same parameters, other rows)");
  }
  std::printf("\n");
}

Json to_json(const std::vector<int>& ranks) {
  Json a = Json::array();
  for (int r : ranks) a.push_back(r);
  return a;
}

// The JSON of the 3D grid stays a prefix of any other's: its dimensions and groups first, those
// of later dimensions (cp, ...) after them.
std::vector<MeshDim> json_dims(const DeviceMesh& mesh) {
  std::vector<MeshDim> dims = mesh.shown();
  std::stable_partition(dims.begin(), dims.end(), [](const MeshDim& d) { return d.named_at_one; });
  return dims;
}

std::vector<GroupColumn> json_groups() {
  std::vector<GroupColumn> groups = group_columns();
  std::stable_partition(groups.begin(), groups.end(),
                        [](const GroupColumn& g) { return *g.needs == '\0'; });
  return groups;
}

void print_json(const DeviceMesh& mesh) {
  const GridShape shape = GridShape::of(mesh);
  Json s = Json::object();
  s.set("world", mesh.world());
  for (const MeshDim& d : json_dims(mesh)) s.set(d.name, d.size);
  Json ranks = Json::array();
  for (int r = 0; r < mesh.world(); ++r) {
    Json j = Json::object();
    j.set("rank", r);
    for (const MeshDim& d : json_dims(mesh)) j.set(d.name, mesh.coord(r, d.name));
    j.set("prev", pp_prev(shape, r));
    j.set("next", pp_next(shape, r));
    j.set("first_stage", is_first_stage(shape, r));
    j.set("last_stage", is_last_stage(shape, r));
    ranks.push_back(std::move(j));
  }
  // Every group of one kind once, ordered by its first member (= the first rank meeting it).
  Json g = Json::object();
  for (const GroupColumn& column : json_groups()) {
    if (!shown(mesh, column)) continue;
    Json all = Json::array();
    for (int r = 0; r < mesh.world(); ++r) {
      const std::vector<int> members_of_r = members(mesh, column, r);
      if (!members_of_r.empty() && members_of_r.front() == r) all.push_back(to_json(members_of_r));
    }
    g.set(column.key, std::move(all));
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
    print_json(q.shape.mesh());
  } else {
    print_table(q.shape.mesh());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return mixpar::run_main(argc, argv, run); }
