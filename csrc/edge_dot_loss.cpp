// The fused link-prediction loss: the schemas. Kernels in csrc/cpu/edge_dot_loss_kernel.cpp and
// csrc/cuda/edge_dot_loss_kernel.cu draw the negatives in-kernel with the generator that
// pyg_edgedot/ops/edge_dot_loss.py defines (shared per-element code: edge_dot_loss_common.h);
// that module's implementation over edge_dot and edge_dot_grad (the same negatives) serves a
// device without a compiled kernel.
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(pyg_edgedot, m) {
  // Positives (src_index[e], dst_index[e]), e < E, and num_negatives = K negatives per
  // positive drawn from (seed [] int64, e, k) by the counter-based generator; negatives come
  // from the key space of (num_src_nodes, num_dst_nodes, self_loops) minus the excluded keys
  // whose adj = e_i - i is excluded_adj [A] int64 (empty: nothing excluded); row_ptr [N_src + 1]
  // int64 counts the excluded keys before each source's row ("structured" negatives; may be
  // empty when nothing is excluded). negatives: "structured" | "uniform"; loss: "bce" | "bpr";
  // reduction: "mean" | "sum".
  // adj_index: negative_sample_index(excluded_adj, num_ranks) for the key space's num_ranks
  // (its size less A), kept by the caller (NegativeSampler), or None: the kernels then build
  // one per call (forward and backward), an O(A) pass that costs more than a small batch
  // scored against a large graph. The loss does not depend on it; a tensor of another size is
  // an error, other values give other negatives, never a bad access.
  // loss: [] in x_src's dtype. first_bad: [1] int64, the first positive with an index out of
  // range, or -1. score_grad: [E, 1 + K] in x_src's dtype, dloss/dscore before the reduction's
  // 1/count (column 0 the positive, 1.. its negatives), what the backward scatters.
  m.def("edge_dot_loss(Tensor x_src, Tensor x_dst, Tensor src_index, Tensor dst_index, "
        "Tensor seed, Tensor excluded_adj, Tensor row_ptr, int num_negatives, "
        "int num_src_nodes, int num_dst_nodes, bool self_loops, str negatives, str loss, "
        "str reduction, Tensor? adj_index=None) "
        "-> (Tensor loss, Tensor first_bad, Tensor score_grad)");
  // The gradients of edge_dot_loss for x_src and x_dst ([N_src, D] and [N_dst, D]; [0, D]
  // where not needed): regenerates the negatives and scatters grad_loss * score_grad
  // (/ count for "mean"), deterministically.
  m.def("edge_dot_loss_grad(Tensor grad_loss, Tensor score_grad, Tensor x_src, Tensor x_dst, "
        "Tensor src_index, Tensor dst_index, Tensor seed, Tensor excluded_adj, Tensor row_ptr, "
        "int num_negatives, int num_src_nodes, int num_dst_nodes, bool self_loops, "
        "str negatives, str loss, str reduction, bool needs_src, bool needs_dst, "
        "Tensor? adj_index=None) -> (Tensor grad_x_src, Tensor grad_x_dst)");
}
