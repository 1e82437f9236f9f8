// Candidate scoring and ranking (OGB-style evaluation): schemas, and the argument checks that
// the CPU and CUDA kernels (csrc/cpu/candidates_cpu.cpp, csrc/cuda/candidates_cuda.cu) run at
// their boundary. Fake kernels and autograd are registered from pyg_edgedot/_candidates.py.
#include <torch/library.h>

#include "common.h"

namespace pyg_edgedot {
namespace {

// [N] (rows == -1) or [N, K] (rows == N) index tensor, int32/int64, on the device of x_src.
void check_candidate_index(const char* op, const at::Tensor& index, const char* name,
                           int64_t dims, const at::Tensor& x_src) {
  if (dims == 1) {
    TORCH_CHECK_VALUE(index.dim() == 1, op, ": ", name, " must be 1-D [N] (got shape ",
                      index.sizes(), ")");
  } else {
    TORCH_CHECK_VALUE(index.dim() == 2, op, ": ", name, " must be 2-D [N, K] (got shape ",
                      index.sizes(), ")");
  }
  TORCH_CHECK_TYPE(is_supported_index(index.scalar_type()), op, ": ", name,
                   " must be int64 or int32 (got ", index.scalar_type(), ")");
  TORCH_CHECK_VALUE(index.device() == x_src.device(), op, ": x_src and ", name,
                    " must be on the same device (got ", x_src.device(), " and ",
                    index.device(), ")");
}

void check_same_index_dtype(const char* op, const at::Tensor& a, const char* a_name,
                            const at::Tensor& b, const char* b_name) {
  TORCH_CHECK_TYPE(a.scalar_type() == b.scalar_type(), op, ": ", a_name, " and ", b_name,
                   " must have the same dtype (got ", a.scalar_type(), " and ", b.scalar_type(),
                   ")");
}

void check_candidate_features(const char* op, const at::Tensor& x_src,
                              const at::Tensor& x_dst) {
  check_features(op, x_src, "x_src");
  check_features(op, x_dst, "x_dst");
  TORCH_CHECK_TYPE(x_src.scalar_type() == x_dst.scalar_type(), op,
                   ": x_src and x_dst must have the same dtype (got ", x_src.scalar_type(),
                   " and ", x_dst.scalar_type(), ")");
  TORCH_CHECK_VALUE(x_src.device() == x_dst.device(), op,
                    ": x_src and x_dst must be on the same device (got ", x_src.device(),
                    " and ", x_dst.device(), ")");
  TORCH_CHECK_VALUE(x_src.size(1) == x_dst.size(1), op,
                    ": x_src and x_dst must have the same feature dimension (got ",
                    x_src.size(1), " and ", x_dst.size(1), ")");
}

}  // namespace

// Declared in the kernel files; defined once here so both backends check the same way.
void check_score_candidates_args(const at::Tensor& x_src, const at::Tensor& x_dst,
                                 const at::Tensor& src_index, const at::Tensor& cand_index) {
  const char* op = "score_candidates";
  check_candidate_features(op, x_src, x_dst);
  check_candidate_index(op, src_index, "src_index", 1, x_src);
  check_candidate_index(op, cand_index, "cand_index", 2, x_src);
  check_same_index_dtype(op, src_index, "src_index", cand_index, "cand_index");
  TORCH_CHECK_VALUE(cand_index.size(0) == src_index.size(0), op,
                    ": cand_index must have one row per entry of src_index (got ",
                    cand_index.size(0), " rows and ", src_index.size(0), " sources)");
}

void check_rank_candidates_args(const at::Tensor& x_src, const at::Tensor& x_dst,
                                const at::Tensor& src_index, const at::Tensor& pos_index,
                                const at::Tensor& neg_index) {
  const char* op = "rank_candidates";
  check_candidate_features(op, x_src, x_dst);
  check_candidate_index(op, src_index, "src_index", 1, x_src);
  check_candidate_index(op, pos_index, "pos_index", 1, x_src);
  check_candidate_index(op, neg_index, "neg_index", 2, x_src);
  check_same_index_dtype(op, src_index, "src_index", pos_index, "pos_index");
  check_same_index_dtype(op, src_index, "src_index", neg_index, "neg_index");
  TORCH_CHECK_VALUE(pos_index.size(0) == src_index.size(0), op,
                    ": pos_index must have one entry per entry of src_index (got ",
                    pos_index.size(0), " and ", src_index.size(0), ")");
  TORCH_CHECK_VALUE(neg_index.size(0) == src_index.size(0), op,
                    ": neg_index must have one row per entry of src_index (got ",
                    neg_index.size(0), " rows and ", src_index.size(0), " sources)");
}

}  // namespace pyg_edgedot

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
