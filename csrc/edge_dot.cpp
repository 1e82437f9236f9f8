// Every schema of pyg_edgedot, in one TORCH_LIBRARY block. The backends register their
// kernels in csrc/cpu and csrc/cuda; fake kernels and autograd are registered from Python
// (pyg_edgedot/_ops.py) right after this library is loaded.
#include <torch/library.h>

TORCH_LIBRARY(pyg_edgedot, m) {
  // out[e] = sum_k x_src[src_index[e], k] * x_dst[dst_index[e], k]          -> [E]
  // first_bad: [1] int64, the first edge with an index out of range (its score is NaN), or -1.
  // The kernels never throw for bad indices: the Python wrapper reads first_bad and raises.
  m.def("edge_dot(Tensor x_src, Tensor x_dst, Tensor src_index, Tensor dst_index) "
        "-> (Tensor out, Tensor first_bad)");
  // out[scatter_index[e], :] += grad_out[e] * x_gather[gather_index[e], :]  -> [num_rows, D]
  // The gradient of edge_dot for one side: (x_dst, src_index, dst_index) for x_src's.
  m.def("edge_dot_grad(Tensor grad_out, Tensor x_gather, Tensor scatter_index, "
        "Tensor gather_index, SymInt num_rows) -> Tensor");
}
