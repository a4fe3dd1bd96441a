#include "core/tree.h"

#include <algorithm>

namespace poseidon::core {
namespace {

int LowestBit(int r) { return r & -r; }

// Tree 0: NCCL's binary tree with root 0 (core/tree.h).
int BtreeParent(int n, int r) {
  if (r == 0) return -1;
  const int b = LowestBit(r);
  const int up = (r - b) | (2 * b);
  return up < n ? up : r - b;
}

std::vector<int> BtreeChildren(int n, int r) {
  std::vector<int> out;
  if (r == 0) {
    if (n > 1) {
      int b = 1;
      while (2 * b < n) b *= 2;
      out.push_back(b);
    }
    return out;
  }
  const int half = LowestBit(r) / 2;
  if (half == 0) return out;
  out.push_back(r - half);
  for (int b = half; b >= 1; b /= 2) {
    if (r + b < n) {
      out.push_back(r + b);
      break;
    }
  }
  return out;
}

// Tree 1 relabels the nodes of tree 0: node r of tree 1 is node Map(r) of tree 0.
int ToTree0(int n, int r) { return n % 2 == 0 ? n - 1 - r : (r - 1 + n) % n; }
int FromTree0(int n, int r) { return n % 2 == 0 ? n - 1 - r : (r + 1) % n; }

}  // namespace

int TreeNodeParent(int n, int r, int tree) {
  if (tree == 0) return BtreeParent(n, r);
  const int p = BtreeParent(n, ToTree0(n, r));
  return p < 0 ? -1 : FromTree0(n, p);
}

std::vector<int> TreeNodeChildren(int n, int r, int tree) {
  if (tree == 0) return BtreeChildren(n, r);
  std::vector<int> out;
  for (int c : BtreeChildren(n, ToTree0(n, r))) out.push_back(FromTree0(n, c));
  std::sort(out.begin(), out.end());
  return out;
}

TreeLinks AllreduceTreeLinks(int machines, int per_machine, int worker, int tree) {
  TreeLinks t;
  const int node = worker / per_machine;
  const int local = worker % per_machine;
  if (local > 0) {
    t.parent = worker - 1;
  } else {
    const int p = TreeNodeParent(machines, node, tree);
    t.parent = p < 0 ? -1 : p * per_machine;
  }
  if (local + 1 < per_machine) t.children.push_back(worker + 1);
  if (local == 0) {
    for (int c : TreeNodeChildren(machines, node, tree)) t.children.push_back(c * per_machine);
  }
  std::sort(t.children.begin(), t.children.end());
  return t;
}

TreeLinks AllreduceTreeLinks(const JobLayout& layout, int worker, int tree) {
  const int P = layout.num_workers;
  const int machines = layout.machine_of[static_cast<size_t>(layout.worker(P - 1))] -
                       layout.machine_of[static_cast<size_t>(layout.worker(0))] + 1;
  return AllreduceTreeLinks(machines, P / machines, worker, tree);
}

int TreeDepth(const JobLayout& layout) {
  // The deepest worker is the last of its machine's chain (per_machine - 1 hops to the head) on
  // the deepest machine; tree 1 relabels tree 0's nodes, so both have tree 0's depth. Each
  // machine's walk up takes O(log machines) steps: the whole is O(machines log machines), where
  // walking every worker's links took O(workers x depth) allocations (every worker computes it).
  const int P = layout.num_workers;
  const int machines = layout.machine_of[static_cast<size_t>(layout.worker(P - 1))] -
                       layout.machine_of[static_cast<size_t>(layout.worker(0))] + 1;
  int depth = 0;
  for (int r = 0; r < machines; ++r) {
    int hops = 0;
    for (int at = r; (at = BtreeParent(machines, at)) >= 0;) ++hops;
    depth = std::max(depth, hops);
  }
  return depth + P / machines - 1;
}

}  // namespace poseidon::core
