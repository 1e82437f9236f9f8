// Argument checks and helpers shared by the CPU and CUDA kernels of pyg_edgedot.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

namespace pyg_edgedot {

inline bool is_supported_float(at::ScalarType t) {
  return t == at::kFloat || t == at::kDouble || t == at::kHalf || t == at::kBFloat16;
}

inline bool is_supported_index(at::ScalarType t) { return t == at::kLong || t == at::kInt; }

inline void check_features(const char* op, const at::Tensor& x, const char* name) {
  TORCH_CHECK_VALUE(x.dim() == 2, op, ": ", name,
                    " must be 2-D [num_nodes, feat_dim] (got shape ", x.sizes(), ")");
  TORCH_CHECK_TYPE(is_supported_float(x.scalar_type()), op, ": ", name,
                   " must be float32, float64, float16 or bfloat16 (got ", x.scalar_type(), ")");
}

inline void check_index(const char* op, const at::Tensor& index, const char* name,
                        const at::Tensor& x, const char* x_name) {
  TORCH_CHECK_VALUE(index.dim() == 1, op, ": ", name, " must be 1-D [E] (got shape ",
                    index.sizes(), ")");
  TORCH_CHECK_TYPE(is_supported_index(index.scalar_type()), op, ": ", name,
                   " must be int64 or int32 (got ", index.scalar_type(), ")");
  TORCH_CHECK_VALUE(index.device() == x.device(), op, ": ", x_name, " and ", name,
                    " must be on the same device (got ", x.device(), " and ", index.device(),
                    ")");
}

// x_src [N_src, D] and x_dst [N_dst, D]: the same dtype, device and D.
inline void check_feature_pair(const char* op, const at::Tensor& x_src, const at::Tensor& x_dst) {
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

// The checks of the forward op, at its boundary.
inline void check_edge_dot_args(const at::Tensor& x_src, const at::Tensor& x_dst,
                                const at::Tensor& src_index, const at::Tensor& dst_index) {
  const char* op = "edge_dot";
  check_feature_pair(op, x_src, x_dst);
  check_index(op, src_index, "src_index", x_src, "x_src");
  check_index(op, dst_index, "dst_index", x_src, "x_src");
  TORCH_CHECK_TYPE(src_index.scalar_type() == dst_index.scalar_type(), op,
                   ": src_index and dst_index must have the same dtype (got ",
                   src_index.scalar_type(), " and ", dst_index.scalar_type(), ")");
  TORCH_CHECK_VALUE(src_index.size(0) == dst_index.size(0), op,
                    ": src_index and dst_index must have the same length (got ",
                    src_index.size(0), " and ", dst_index.size(0), ")");
}

// The checks of the gradient op, at its boundary.
inline void check_edge_dot_grad_args(const at::Tensor& grad_out, const at::Tensor& x_gather,
                                     const at::Tensor& scatter_index,
                                     const at::Tensor& gather_index, int64_t num_rows) {
  const char* op = "edge_dot_grad";
  check_features(op, x_gather, "x_gather");
  check_index(op, scatter_index, "scatter_index", x_gather, "x_gather");
  check_index(op, gather_index, "gather_index", x_gather, "x_gather");
  TORCH_CHECK_VALUE(grad_out.dim() == 1 && grad_out.size(0) == scatter_index.size(0) &&
                        gather_index.size(0) == scatter_index.size(0),
                    op, ": grad_out, scatter_index and gather_index must all be [E] (got ",
                    grad_out.sizes(), ", ", scatter_index.sizes(), " and ",
                    gather_index.sizes(), ")");
  TORCH_CHECK_TYPE(scatter_index.scalar_type() == gather_index.scalar_type(), op,
                   ": scatter_index and gather_index must have the same dtype (got ",
                   scatter_index.scalar_type(), " and ", gather_index.scalar_type(), ")");
  TORCH_CHECK_TYPE(grad_out.scalar_type() == x_gather.scalar_type(), op,
                   ": grad_out and x_gather must have the same dtype (got ",
                   grad_out.scalar_type(), " and ", x_gather.scalar_type(), ")");
  TORCH_CHECK_VALUE(grad_out.device() == x_gather.device(), op,
                    ": grad_out and x_gather must be on the same device (got ",
                    grad_out.device(), " and ", x_gather.device(), ")");
  TORCH_CHECK_VALUE(num_rows >= 0, op, ": num_rows must be >= 0 (got ", num_rows, ")");
}

// Kernels read rows through a row stride; only a column stride other than 1 needs a copy.
inline at::Tensor unit_column_stride(const at::Tensor& x) {
  return (x.size(1) <= 1 || x.stride(1) == 1) ? x : x.contiguous();
}

}  // namespace pyg_edgedot

namespace pyg_edgedot {

// The extra checks of the relation-weighted forward (edge_dot_rel), at its boundary.
inline void check_rel_args(const at::Tensor& x_src, const at::Tensor& rel,
                           const at::Tensor& src_index, const at::Tensor& rel_index) {
  const char* op = "edge_dot_rel";
  check_features(op, rel, "rel");
  TORCH_CHECK_TYPE(rel.scalar_type() == x_src.scalar_type(), op,
                   ": rel and x_src must have the same dtype (got ", rel.scalar_type(), " and ",
                   x_src.scalar_type(), ")");
  TORCH_CHECK_VALUE(rel.device() == x_src.device(), op,
                    ": rel and x_src must be on the same device (got ", rel.device(), " and ",
                    x_src.device(), ")");
  TORCH_CHECK_VALUE(rel.size(1) == x_src.size(1), op,
                    ": rel and x_src must have the same feature dimension (got ", rel.size(1),
                    " and ", x_src.size(1), ")");
  check_index(op, rel_index, "rel_index", x_src, "x_src");
  TORCH_CHECK_TYPE(rel_index.scalar_type() == src_index.scalar_type(), op,
                   ": rel_index and src_index must have the same dtype (got ",
                   rel_index.scalar_type(), " and ", src_index.scalar_type(), ")");
  TORCH_CHECK_VALUE(rel_index.size(0) == src_index.size(0), op,
                    ": rel_index and src_index must have the same length (got ",
                    rel_index.size(0), " and ", src_index.size(0), ")");
}

// The checks of the three-factor gradient op (edge_dot_rel_grad), at its boundary.
inline void check_rel_grad_args(const at::Tensor& grad_out, const at::Tensor& x_a,
                                const at::Tensor& x_b, const at::Tensor& scatter_index,
                                const at::Tensor& a_index, const at::Tensor& b_index,
                                int64_t num_rows) {
  check_edge_dot_grad_args(grad_out, x_b, scatter_index, b_index, num_rows);
  const char* op = "edge_dot_rel_grad";
  check_features(op, x_a, "x_a");
  TORCH_CHECK_TYPE(x_a.scalar_type() == x_b.scalar_type(), op,
                   ": x_a and x_b must have the same dtype (got ", x_a.scalar_type(), " and ",
                   x_b.scalar_type(), ")");
  TORCH_CHECK_VALUE(x_a.device() == x_b.device(), op,
                    ": x_a and x_b must be on the same device (got ", x_a.device(), " and ",
                    x_b.device(), ")");
  TORCH_CHECK_VALUE(x_a.size(1) == x_b.size(1), op,
                    ": x_a and x_b must have the same feature dimension (got ", x_a.size(1),
                    " and ", x_b.size(1), ")");
  check_index(op, a_index, "a_index", x_b, "x_b");
  TORCH_CHECK_TYPE(a_index.scalar_type() == b_index.scalar_type(), op,
                   ": a_index and b_index must have the same dtype (got ",
                   a_index.scalar_type(), " and ", b_index.scalar_type(), ")");
  TORCH_CHECK_VALUE(a_index.size(0) == b_index.size(0), op,
                    ": a_index and b_index must have the same length (got ", a_index.size(0),
                    " and ", b_index.size(0), ")");
}

}  // namespace pyg_edgedot

namespace pyg_edgedot {

// [N] (rows == -1) or [N, K] (rows == N) index tensor, int32/int64, on the device of x_src.
inline void check_candidate_index(const char* op, const at::Tensor& index, const char* name,
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

inline void check_same_index_dtype(const char* op, const at::Tensor& a, const char* a_name,
                                   const at::Tensor& b, const char* b_name) {
  TORCH_CHECK_TYPE(a.scalar_type() == b.scalar_type(), op, ": ", a_name, " and ", b_name,
                   " must have the same dtype (got ", a.scalar_type(), " and ", b.scalar_type(),
                   ")");
}

// The checks of the candidate ops, at their boundary.
inline void check_score_candidates_args(const at::Tensor& x_src, const at::Tensor& x_dst,
                                        const at::Tensor& src_index,
                                        const at::Tensor& cand_index) {
  const char* op = "score_candidates";
  check_feature_pair(op, x_src, x_dst);
  check_candidate_index(op, src_index, "src_index", 1, x_src);
  check_candidate_index(op, cand_index, "cand_index", 2, x_src);
  check_same_index_dtype(op, src_index, "src_index", cand_index, "cand_index");
  TORCH_CHECK_VALUE(cand_index.size(0) == src_index.size(0), op,
                    ": cand_index must have one row per entry of src_index (got ",
                    cand_index.size(0), " rows and ", src_index.size(0), " sources)");
}

inline void check_rank_candidates_args(const at::Tensor& x_src, const at::Tensor& x_dst,
                                       const at::Tensor& src_index, const at::Tensor& pos_index,
                                       const at::Tensor& neg_index) {
  const char* op = "rank_candidates";
  check_feature_pair(op, x_src, x_dst);
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
