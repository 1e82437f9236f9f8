// Top-k retrieval (recommendation): the schema. The CPU kernel is in csrc/cpu/topk_kernel.cpp,
// the CUDA kernel in csrc/cuda/topk_kernel.cu (its per-element rules, the order, the running
// top-k and the exclusion cursor, in csrc/topk_order.h). Without a compiled library
// the pure-PyTorch implementation registered from pyg_edgedot/ops/topk.py runs. Fake kernel
// and the (non-differentiable) autograd registration are in that module too.
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(pyg_edgedot, m) {
  // For each row n, with s = src_index[n]: the k rows j of x_dst with the highest
  // <x_src[s], x_dst[j]> (accumulated in float32, float64 for float64), ties broken by the
  // lower j, leaving out the excluded pairs (s, j). A NaN score ranks as -inf.
  // The excluded pairs are a CSR over the rows of x_src: exclude_dst[exclude_ptr[s] :
  // exclude_ptr[s + 1]] are the excluded destinations of source s, ascending (duplicates
  // allowed). exclude_ptr is [N_src + 1] int64, or empty for no exclusion; exclude_dst is [E]
  // int64. The kernels read the CSR defensively (ranges clamped to [0, E], values out of range
  // never match), so a malformed CSR gives wrong exclusions, never a read outside it.
  // Returns scores [N, k] (x_src's dtype), index [N, k] int64 and first_bad [1] int64 (the
  // first row n whose src_index[n] is out of range, or -1). When fewer than k destinations are
  // left for a row (k > N_dst - excluded, or a bad src_index[n]) the rest of the row is
  // padding: index N_dst (one past the last row of x_dst) and score -inf.
  // sorted: each row in descending score, ties by the lower index; otherwise any order of
  // the same set.
  m.def("topk_dst(Tensor x_src, Tensor x_dst, Tensor src_index, Tensor exclude_ptr, "
        "Tensor exclude_dst, int k, bool sorted=True) -> (Tensor scores, Tensor index, "
        "Tensor first_bad)");
}
