// core/tree.h: the geometry of NCCL's tree all-reduce, which a baseline's collectives run with
// protocol.allreduce_algorithm: tree (core/collectives.h, core/worker.cc).
//
// NCCL (src/graph/trees.cc, ncclGetBtree / ncclGetDtree; src/graph/connect.cc) joins the machines
// ("nodes") by a double binary tree and the GPUs of one machine by a chain:
//   - binary tree over n nodes, root 0: a node r > 0 whose lowest set bit is b hangs from
//     (r - b) | 2b (bitwise or), or from r - b when that is out of range; its children are r - b/2 and
//     r + b', b' the largest power of two <= b/2 with r + b' < n (none when b = 1). Node 0's one
//     child is the largest power of two below n.
//   - the second tree is the first mirrored (node r as n-1-r) when n is even, shifted by one
//     (node r as r-1 mod n) when n is odd, so that a node inner in one tree is (mostly) a leaf in
//     the other and both trees together send and receive about the same bytes at every node.
//   - inside a machine the W processes form a chain: local rank 0 is the machine's head, which
//     the tree joins; local rank l > 0 hangs from l - 1.
// Each piece of a collective (core/ring.h: pieces of chunk_bytes) is split in two halves,
// segments 0 and 1 of RingSegmentFloats with P = 2: half h goes up and down tree h. Up: a worker
// adds its children's partial sums of the half to its own (RingReceive, reduce) and sends the
// result to its parent; the root then holds the sum and sends it down, every worker copying it
// (RingReceive, gather) and passing it on to its children. A tree step's `step` is
// 2 * half + phase (phase 0 up, 1 down): TreeStep / TreeHalf / TreePhaseDown.
//
//   const TreeLinks up0 = AllreduceTreeLinks(layout, worker_index, 0);
//   // up0.parent: -1 at the root; up0.children: the workers whose halves arrive here
#pragma once

#include <vector>

#include "core/job.h"

namespace poseidon::core {

// Steps of a tree all-reduce's messages: two halves, each up and down.
inline constexpr int kTreeSteps = 4;
inline int TreeStep(int half, bool down) { return 2 * half + (down ? 1 : 0); }
inline int TreeHalf(int step) { return step / 2; }
inline bool TreePhaseDown(int step) { return step % 2 == 1; }

// Node `r`'s parent in NCCL's binary tree over n nodes (tree 0) or its mirror / shift (tree 1);
// -1 at the root.
int TreeNodeParent(int n, int r, int tree);
// Node `r`'s children in that tree, ascending.
std::vector<int> TreeNodeChildren(int n, int r, int tree);

// One worker's links in tree `tree` (0 or 1): worker indices, parent -1 at the root.
struct TreeLinks {
  int parent = -1;
  std::vector<int> children;  // ascending
};
// Workers are the processes of the job's worker machines, `per_machine` of them on each
// (JobLayout::Build: worker i on machine i / per_machine).
TreeLinks AllreduceTreeLinks(int machines, int per_machine, int worker, int tree);
// The same for a job's layout: its worker machines and workers per machine read from machine_of.
TreeLinks AllreduceTreeLinks(const JobLayout& layout, int worker, int tree);
// The most hops from a worker up to the root in either tree (NCCL's tree depth, which sets how
// finely it pipelines: core/collectives.h TreePieceBytes).
int TreeDepth(const JobLayout& layout);

}  // namespace poseidon::core
