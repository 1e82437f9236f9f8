// Schemas of the relation-weighted (DistMult) ops. Their kernels are the edge_dot kernels with
// a third row per edge (csrc/cpu/edge_dot_kernel.cpp, csrc/cuda/edge_dot_kernel.cu).
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(pyg_edgedot, m) {
  // out[e] = sum_k x_src[src_index[e], k] * rel[rel_index[e], k] * x_dst[dst_index[e], k]
  // report_bad and first_bad as in edge_dot: the first edge with any of its three indices out
  // of range (or an empty tensor without report_bad).
  m.def("edge_dot_rel(Tensor x_src, Tensor x_dst, Tensor rel, Tensor src_index, "
        "Tensor dst_index, Tensor rel_index, bool report_bad=True) "
        "-> (Tensor out, Tensor first_bad)");
  // out[scatter_index[e], :] += grad_out[e] * x_a[a_index[e], :] * x_b[b_index[e], :]
  // -> [num_rows, D] in x_b's dtype. Each of the three gradients of edge_dot_rel is one call:
  // x_src's is (rel, x_dst, src_index, rel_index, dst_index), rel's (x_src, x_dst,
  // rel_index, src_index, dst_index).
  m.def("edge_dot_rel_grad(Tensor grad_out, Tensor x_a, Tensor x_b, Tensor scatter_index, "
        "Tensor a_index, Tensor b_index, SymInt num_rows) -> Tensor");
}
