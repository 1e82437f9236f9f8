// Candidate scoring and ranking (OGB-style evaluation): schemas. The kernels are in
// csrc/cpu/candidates_kernel.cpp and csrc/cuda/candidates_kernel.cu, their argument checks in
// common.h; fake kernels and autograd are registered from Python.
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(pyg_edgedot, m) {
  // out[n, k] = sum_d x_src[src_index[n], d] * x_dst[cand_index[n, k], d]     -> [N, K]
  // first_bad: [1] int64, the first row n holding an index out of range (src_index[n] or any
  // cand_index[n, k]), or -1. A pair with an index out of range scores NaN. The kernels never
  // throw for bad indices: the Python wrapper reads first_bad and raises.
  m.def("score_candidates(Tensor x_src, Tensor x_dst, Tensor src_index, Tensor cand_index) "
        "-> (Tensor out, Tensor first_bad)");
  // rank[n] = 1 + 0.5 * (#{k: neg > pos} + #{k: neg >= pos}), float32 [N], where
  // pos = score(src_index[n], pos_index[n]) and neg = score(src_index[n], neg_index[n, k]),
  // both rounded to the dtype of x_src (OGB's tie rule). first_bad as above (src_index[n],
  // pos_index[n] or any neg_index[n, k]); a row with an index out of range ranks NaN.
  m.def("rank_candidates(Tensor x_src, Tensor x_dst, Tensor src_index, Tensor pos_index, "
        "Tensor neg_index) -> (Tensor rank, Tensor first_bad)");
}
