// The geometry of the tree all-reduce (core/tree.h): NCCL's double binary tree over machines and
// a chain inside each.
#include "core/tree.h"

#include "core/collectives.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace poseidon::core {
namespace {

// Every node but one root has a parent that lists it as a child, every child names its parent,
// every node is reached from the root, and no node has more than two children.
void ExpectATree(int n, int tree) {
  const std::string where = "n " + std::to_string(n) + " tree " + std::to_string(tree);
  int roots = 0, root = -1;
  for (int r = 0; r < n; ++r) {
    const int p = TreeNodeParent(n, r, tree);
    if (p < 0) {
      ++roots;
      root = r;
      continue;
    }
    ASSERT_GE(p, 0) << where;
    ASSERT_LT(p, n) << where;
    const std::vector<int> siblings = TreeNodeChildren(n, p, tree);
    EXPECT_NE(std::find(siblings.begin(), siblings.end(), r), siblings.end())
        << where << ": " << r << " hangs from " << p << ", which does not list it";
  }
  ASSERT_EQ(roots, 1) << where;
  std::vector<int> seen(static_cast<size_t>(n), 0);
  std::vector<int> todo = {root};
  while (!todo.empty()) {
    const int r = todo.back();
    todo.pop_back();
    ASSERT_EQ(seen[static_cast<size_t>(r)]++, 0) << where << ": " << r << " reached twice";
    const std::vector<int> kids = TreeNodeChildren(n, r, tree);
    EXPECT_LE(kids.size(), 2u) << where << " node " << r;
    for (int c : kids) {
      EXPECT_EQ(TreeNodeParent(n, c, tree), r) << where;
      todo.push_back(c);
    }
  }
  for (int r = 0; r < n; ++r) EXPECT_EQ(seen[static_cast<size_t>(r)], 1) << where << " node " << r;
}

TEST(AllreduceTree, BothTreesAreTreesForEveryNodeCount) {
  for (int n = 1; n <= 70; ++n) {
    ExpectATree(n, 0);
    ExpectATree(n, 1);
  }
}

// NCCL's own pictures (src/graph/trees.cc): 14 nodes, and the roots of the second tree.
TEST(AllreduceTree, MatchesNcclsPictures) {
  // 0 -- 8; 8: 4, 12; 4: 2, 6; 12: 10, 13; 2: 1, 3; 10: 9, 11; leaves odd.
  EXPECT_EQ(TreeNodeChildren(14, 0, 0), (std::vector<int>{8}));
  EXPECT_EQ(TreeNodeChildren(14, 8, 0), (std::vector<int>{4, 12}));
  EXPECT_EQ(TreeNodeChildren(14, 12, 0), (std::vector<int>{10, 13}));
  EXPECT_EQ(TreeNodeChildren(14, 4, 0), (std::vector<int>{2, 6}));
  EXPECT_EQ(TreeNodeChildren(14, 13, 0), (std::vector<int>{}));
  EXPECT_EQ(TreeNodeParent(14, 13, 0), 12);
  // 13 nodes: 12 has only 10 below it (12 + 1 is out of range).
  EXPECT_EQ(TreeNodeChildren(13, 12, 0), (std::vector<int>{10}));
  // The second tree's root: the last node when n is even (mirror), node 1 when odd (shift).
  EXPECT_EQ(TreeNodeParent(12, 11, 1), -1);
  EXPECT_EQ(TreeNodeChildren(12, 11, 1), (std::vector<int>{3}));
  EXPECT_EQ(TreeNodeParent(13, 1, 1), -1);
  EXPECT_EQ(TreeNodeChildren(13, 1, 1), (std::vector<int>{9}));
  // Even n, mirrored: the inner nodes of one tree (even ranks) are the leaves of the other.
  for (int r = 0; r < 12; ++r) {
    const bool inner0 = !TreeNodeChildren(12, r, 0).empty();
    const bool inner1 = !TreeNodeChildren(12, r, 1).empty();
    EXPECT_FALSE(inner0 && inner1) << r;
  }
}

// Inside a machine a chain from its head (local rank 0); the tree joins the heads.
TEST(AllreduceTree, AChainInsideEachMachine) {
  // 3 machines of 4: machine tree 0 over 3 nodes is 0 -- 2 -- 1.
  const TreeLinks head0 = AllreduceTreeLinks(3, 4, 0, 0);
  EXPECT_EQ(head0.parent, -1);
  EXPECT_EQ(head0.children, (std::vector<int>{1, 8}));
  const TreeLinks mid = AllreduceTreeLinks(3, 4, 5, 0);
  EXPECT_EQ(mid.parent, 4);
  EXPECT_EQ(mid.children, (std::vector<int>{6}));
  const TreeLinks last = AllreduceTreeLinks(3, 4, 11, 0);
  EXPECT_EQ(last.parent, 10);
  EXPECT_TRUE(last.children.empty());
  const TreeLinks head2 = AllreduceTreeLinks(3, 4, 8, 0);
  EXPECT_EQ(head2.parent, 0);
  EXPECT_EQ(head2.children, (std::vector<int>{4, 9}));
  const TreeLinks head1 = AllreduceTreeLinks(3, 4, 4, 0);
  EXPECT_EQ(head1.parent, 8);
  // From a job's layout: machines and workers per machine read from it.
  const JobLayout l = JobLayout::Build(3, 4, 1, true);
  for (int w = 0; w < 12; ++w) {
    for (int t = 0; t < 2; ++t) {
      const TreeLinks a = AllreduceTreeLinks(l, w, t);
      const TreeLinks b = AllreduceTreeLinks(3, 4, w, t);
      EXPECT_EQ(a.parent, b.parent);
      EXPECT_EQ(a.children, b.children);
    }
  }
}

// NCCL's tree pipelining (core/collectives.h TreePieceBytes): a chunk per tree from chunk_bytes,
// halved while there are fewer than 8 x depth chunks above 128 KiB, 4 x depth above 64 KiB and
// depth above 32 KiB; a piece is a chunk of each of the two trees.
TEST(AllreduceTree, PiecesShrinkUntilADeepTreeHasEnoughInFlight) {
  const int64_t k = 1024;
  // 100 MB on depth 3: 95 chunks of 512 KiB per tree, >= 24: unchanged.
  EXPECT_EQ(TreePieceBytes(100'000'000, 512 * k, 3), 1024 * k);
  // 4,004,000 B on depth 1: 512 KiB -> 256 KiB (3 < 8) -> 128 KiB (7 < 8), stops at 128 KiB.
  EXPECT_EQ(TreePieceBytes(4'004'000, 512 * k, 1), 256 * k);
  // 582,312 B on depth 3: down to 128 KiB, then 64 KiB (2 < 12), then 4 >= 3 chunks: stop.
  EXPECT_EQ(TreePieceBytes(582'312, 512 * k, 3), 128 * k);
  // A tiny collective: down to 32 KiB, not below.
  EXPECT_EQ(TreePieceBytes(40, 512 * k, 7), 64 * k);
  // A chunk already small is kept.
  EXPECT_EQ(TreePieceBytes(40, 20'000, 7), 40'000);
  // Depth from a layout: 8 machines of one worker, 3 hops; 3 machines of 4, the chain of 3 below
  // the deepest head plus its 2 hops to the root.
  EXPECT_EQ(TreeDepth(JobLayout::Colocated(8, 1)), 3);
  EXPECT_EQ(TreeDepth(JobLayout::Colocated(2, 1)), 1);
  EXPECT_EQ(TreeDepth(JobLayout::Build(3, 4, 1, true)), 5);
  // The closed form (the chain plus the deepest machine) is the most hops any worker walks up
  // either tree's links.
  for (int machines = 1; machines <= 70; ++machines) {
    for (int per : {1, 2, 3, 8}) {
      const JobLayout layout = JobLayout::Build(machines, per, 1, true);
      int walked = 0;
      for (int t = 0; t < 2; ++t) {
        for (int w = 0; w < layout.num_workers; ++w) {
          int hops = 0;
          for (int at = w; (at = AllreduceTreeLinks(layout, at, t).parent) >= 0;) ++hops;
          walked = std::max(walked, hops);
        }
      }
      EXPECT_EQ(TreeDepth(layout), walked) << machines << " x " << per;
    }
  }
}

}  // namespace
}  // namespace poseidon::core
