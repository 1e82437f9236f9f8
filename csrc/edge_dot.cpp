// Schemas of edge_dot and its gradients, in the one TORCH_LIBRARY block of pyg_edgedot; every
// other csrc/*.cpp (one per op group) adds its group's with TORCH_LIBRARY_FRAGMENT, and each
// kernel file (csrc/cpu/*_kernel.cpp, csrc/cuda/*_kernel.cu) registers its backend's kernels
// with TORCH_LIBRARY_IMPL. edge_dot's kernels are in csrc/cpu/edge_dot_kernel.cpp and
// csrc/cuda/edge_dot_kernel.cu, the checks at the op boundary in common.h; fake kernels and
// autograd are registered from Python right after this library is loaded. Each schema is one
// m.def of adjacent string literals: the Python side reads them from every csrc/*.cpp
// (pyg_edgedot/_build.py's schemas) to define the same ops when the extension cannot be built.
#include <torch/library.h>

TORCH_LIBRARY(pyg_edgedot, m) {
  // out[e] = sum_k x_src[src_index[e], k] * x_dst[dst_index[e], k]          -> [E]
  // An edge with an index out of range scores NaN, whatever report_bad says. first_bad: with
  // report_bad, [1] int64, the first such edge or -1; without, an empty [0] int64 tensor (no
  // device work: the caller said it will not read it, e.g. an edge_index already validated).
  // The kernels never throw for bad indices: the Python wrapper reads first_bad and raises.
  m.def("edge_dot(Tensor x_src, Tensor x_dst, Tensor src_index, Tensor dst_index, "
        "bool report_bad=True) -> (Tensor out, Tensor first_bad)");
  // out[scatter_index[e], :] += grad_out[e] * x_gather[gather_index[e], :]  -> [num_rows, D]
  // The gradient of edge_dot for one side: (x_dst, src_index, dst_index) for x_src's.
  m.def("edge_dot_grad(Tensor grad_out, Tensor x_gather, Tensor scatter_index, "
        "Tensor gather_index, SymInt num_rows) -> Tensor");
  // Both gradients of edge_dot in one call, the same bits as the two edge_dot_grad calls
  // (x_dst, src_index, dst_index, N_src) and (x_src, dst_index, src_index, N_dst): one op, so
  // that a backend can take both sides in the same launches.
  m.def("edge_dot_pair_grad(Tensor grad_out, Tensor x_src, Tensor x_dst, Tensor src_index, "
        "Tensor dst_index) -> (Tensor grad_src, Tensor grad_dst)");
}
