// piece_runs against chapter 8's box_runs (what write_pieces and read_pieces use to place every
// stored element) on the pieces layouts produce: tp row and column blocks, pipeline-whole
// tensors, ZeRO flat ranges straddling rows, 3-D boxes, scalars, empty pieces.
#include "ch08_piece_runs/piece_runs.h"

#include <gtest/gtest.h>

#include "ch08_full_3d/checkpoint_pieces.h"

namespace mixpar::exercises {
namespace {

std::vector<GlobalRun> reference(const Shape& global, const StoredPiece& p) {
  std::vector<GlobalRun> out;
  for (const ch08::PieceRun& r :
       ch08::box_runs(global, {p.offset, p.shape, p.flat_begin, p.flat_count})) {
    out.push_back({r.global, r.local, r.count});
  }
  return out;
}

std::int64_t numel(const std::vector<std::int64_t>& s) {
  std::int64_t n = 1;
  for (std::int64_t d : s) n *= d;
  return n;
}

void expect_reference(const Shape& global, const StoredPiece& p) {
  SCOPED_TRACE(testing::Message() << "tensor " << shape_str(global) << ", box at "
                                  << shape_str(p.offset) << " of " << shape_str(p.shape)
                                  << ", flat [" << p.flat_begin << ", +" << p.flat_count << ")");
  EXPECT_EQ(piece_runs(global, p), reference(global, p));
}

TEST(PieceRuns, AWholeTensorIsOneRun) {
  const std::vector<GlobalRun> want = {{0, 0, 24}};
  EXPECT_EQ(piece_runs({4, 6}, {{0, 0}, {4, 6}, 0, 24}), want);
}

TEST(PieceRuns, ARowBlockIsOneRunAColumnBlockOnePerRow) {
  const std::vector<GlobalRun> rows = {{12, 0, 12}};
  EXPECT_EQ(piece_runs({4, 6}, {{2, 0}, {2, 6}, 0, 12}), rows);
  const std::vector<GlobalRun> cols = {{3, 0, 3}, {9, 3, 3}, {15, 6, 3}, {21, 9, 3}};
  EXPECT_EQ(piece_runs({4, 6}, {{0, 3}, {4, 3}, 0, 12}), cols);
}

TEST(PieceRuns, AFlatRangeMayStartAndEndMidRow) {
  // ZeRO's flat shard of a tp column block: elements 2..7 of the box's 12.
  const std::vector<GlobalRun> want = {{5, 0, 1}, {9, 1, 3}, {15, 4, 2}};
  EXPECT_EQ(piece_runs({4, 6}, {{0, 3}, {4, 3}, 2, 6}), want);
}

TEST(PieceRuns, ScalarsAndEmptyPieces) {
  const std::vector<GlobalRun> one = {{0, 0, 1}};
  EXPECT_EQ(piece_runs({}, {{}, {}, 0, 1}), one);
  EXPECT_TRUE(piece_runs({4, 6}, {{1, 1}, {2, 2}, 3, 0}).empty());
}

// Every box with offsets 0..2 and every extent that fits, in each dimension, and flat ranges of
// a few starts and lengths in each box.
void every_box(const Shape& g, StoredPiece& p, std::size_t d) {
  if (d == g.size()) {
    const std::int64_t n = numel(p.shape);
    for (std::int64_t b : {std::int64_t{0}, std::int64_t{1}, n / 3, n / 2}) {
      for (std::int64_t c : {n - b, (n - b) / 2, std::int64_t{1}}) {
        if (b > n || c < 0 || b + c > n) continue;
        p.flat_begin = b;
        p.flat_count = c;
        expect_reference(g, p);
      }
    }
    return;
  }
  for (std::int64_t off = 0; off <= 2 && off < g[d]; ++off) {
    for (std::int64_t len = 1; off + len <= g[d]; ++len) {
      p.offset.push_back(off);
      p.shape.push_back(len);
      every_box(g, p, d + 1);
      p.offset.pop_back();
      p.shape.pop_back();
      if (::testing::Test::HasFailure()) return;  // one wrong case is enough to read
    }
  }
}

TEST(PieceRuns, EqualsChapterEightsBoxRunsOnEveryBoxAndRange) {
  for (const Shape& g : std::vector<Shape>{{10}, {4, 6}, {3, 4, 5}, {2, 3, 1, 4}}) {
    StoredPiece p;
    every_box(g, p, 0);
    if (HasFailure()) return;
  }
}

}  // namespace
}  // namespace mixpar::exercises
