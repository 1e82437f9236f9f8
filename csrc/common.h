// What the CPU and CUDA kernels of pyg_edgedot share: the checks at each op's boundary, and
// the op entry points that run them before a backend's kernel.
//
// The Python wrappers check every argument first and raise the exceptions users see. These
// checks are for direct callers of torch.ops.pyg_edgedot: they guard only what the kernels
// index by (dims, dtypes, devices, lengths). Index values are not checked here: the kernels
// skip an index out of range and report it (first_bad), they never throw for one.
//
// Every check is a PYG_EDGEDOT_CHECK (check.h): numbers enter its messages through
// std::to_string, never an ostream.
#pragma once

#include <ATen/ATen.h>
#include <torch/library.h>

#include <cstdint>
#include <string>
#include <tuple>

#include "check.h"

namespace pyg_edgedot {

// ---------------------------------------------------------------------------------------
// Checks
// ---------------------------------------------------------------------------------------

// x: [num_nodes, feat_dim]. The kernels dispatch on the dtype of the first feature tensor of
// an op and reject any other dtype themselves.
inline void check_rows(const char* op, const at::Tensor& x, const char* name) {
  PYG_EDGEDOT_CHECK(x.dim() == 2, op, ": ", name, " must be 2-D");
}

// The rows of a gradient: a count, so at least 0 (below 0, at::zeros' message names no
// argument).
inline void check_num_rows(const char* op, int64_t num_rows) {
  PYG_EDGEDOT_CHECK(num_rows >= 0, op, ": num_rows must be >= 0 (got ",
                    std::to_string(num_rows), ")");
}

// x is read as rows of `like`: its dtype, on its device, over its feature dimension.
inline void check_rows_like(const char* op, const at::Tensor& x, const char* name,
                            const at::Tensor& like, const char* like_name) {
  check_rows(op, x, name);
  PYG_EDGEDOT_CHECK(x.scalar_type() == like.scalar_type() && x.device() == like.device() &&
                        x.size(1) == like.size(1),
                    op, ": ", name, " must have the dtype, device and feature dimension of ",
                    like_name);
}

// index: `dims`-D ([E], [N] or [N, K]) on the device of the features x. The kernels dispatch
// on the dtype of the first index of an op.
inline void check_index(const char* op, const at::Tensor& index, const char* name, int64_t dims,
                        const at::Tensor& x) {
  PYG_EDGEDOT_CHECK(index.dim() == dims, op, ": ", name, " must be ", std::to_string(dims), "-D");
  PYG_EDGEDOT_CHECK(index.device() == x.device(), op, ": ", name, " must be on ", x.device());
}

// index is read alongside `first` (the index the kernels dispatch on): its dtype, and as many
// entries (or rows) as `first`.
inline void check_index_like(const char* op, const at::Tensor& index, const char* name,
                             int64_t dims, const at::Tensor& first, const char* first_name,
                             const at::Tensor& x) {
  check_index(op, index, name, dims, x);
  PYG_EDGEDOT_CHECK(
      index.scalar_type() == first.scalar_type() && index.size(0) == first.size(0), op, ": ",
      name, " must have the dtype and length of ", first_name);
}

// grad_out: [E], one entry per index (scatter_index, or src_index for the pair of
// gradients), read as x's dtype on x's device.
inline void check_grad_out(const char* op, const at::Tensor& grad_out, const at::Tensor& index,
                           const at::Tensor& x, const char* x_name,
                           const char* index_name = "scatter_index") {
  PYG_EDGEDOT_CHECK(grad_out.dim() == 1 && grad_out.size(0) == index.size(0), op,
                    ": grad_out must be 1-D with the length of ", index_name);
  PYG_EDGEDOT_CHECK(
      grad_out.scalar_type() == x.scalar_type() && grad_out.device() == x.device(), op,
      ": grad_out must have the dtype and device of ", x_name);
}

// x_src [N_src, D], x_dst [N_dst, D] and the first index, src_index ([E] or [N]).
inline void check_source_and_dest(const char* op, const at::Tensor& x_src,
                                  const at::Tensor& x_dst, const at::Tensor& src_index) {
  check_rows(op, x_src, "x_src");
  check_rows_like(op, x_dst, "x_dst", x_src, "x_src");
  check_index(op, src_index, "src_index", 1, x_src);
}

// topk_dst's arguments (schema in csrc/topk.cpp): features and src_index as above, k >= 0, the
// exclusion CSR (1-D int64 on x_src's device; exclude_ptr empty or [N_src + 1]), float rows.
inline void check_topk_args(const char* op, const at::Tensor& x_src, const at::Tensor& x_dst,
                            const at::Tensor& src_index, const at::Tensor& exclude_ptr,
                            const at::Tensor& exclude_dst, int64_t k) {
  check_source_and_dest(op, x_src, x_dst, src_index);
  PYG_EDGEDOT_CHECK(k >= 0, op, ": k must be >= 0 (got ", std::to_string(k), ")");
  for (const at::Tensor* t : {&exclude_ptr, &exclude_dst}) {
    PYG_EDGEDOT_CHECK(
        t->dim() == 1 && t->scalar_type() == at::kLong && t->device() == x_src.device(), op,
        ": exclude_ptr and exclude_dst must be 1-D int64 on ", x_src.device());
  }
  PYG_EDGEDOT_CHECK(exclude_ptr.numel() == 0 || exclude_ptr.numel() == x_src.size(0) + 1, op,
                    ": exclude_ptr must be empty or have N_src + 1 entries");
  PYG_EDGEDOT_CHECK(x_src.scalar_type() == at::kFloat || x_src.scalar_type() == at::kDouble ||
                        x_src.scalar_type() == at::kHalf || x_src.scalar_type() == at::kBFloat16,
                    op, ": x_src must be float32, float64, float16 or bfloat16");
}

// Kernels read rows through a row stride; only a column stride other than 1 needs a copy.
inline at::Tensor unit_column_stride(const at::Tensor& x) {
  return (x.size(1) <= 1 || x.stride(1) == 1) ? x : x.contiguous();
}

// ---------------------------------------------------------------------------------------
// Op entry points: the checks, then a backend's kernel. A backend registers its kernels with
// impl_edge_dot_ops and impl_candidate_ops, so both backends check alike.
// ---------------------------------------------------------------------------------------

// The forward of edge_dot and edge_dot_rel: rel and rel_index undefined for edge_dot;
// report_bad false: first_bad is an empty tensor and nothing is done to fill it.
using ForwardKernel = std::tuple<at::Tensor, at::Tensor> (*)(
    const at::Tensor& x_src, const at::Tensor& x_dst, const at::Tensor& rel,
    const at::Tensor& src_index, const at::Tensor& dst_index, const at::Tensor& rel_index,
    bool report_bad);

// out[scatter[e]] += grad[e] * (x_other[other[e]] *) x_gather[gather[e]]: x_other and
// other_index undefined for edge_dot_grad.
using GradKernel = at::Tensor (*)(const at::Tensor& grad_out, const at::Tensor& x_gather,
                                  const at::Tensor& scatter_index,
                                  const at::Tensor& gather_index, const at::Tensor& x_other,
                                  const at::Tensor& other_index, int64_t num_rows);

template <ForwardKernel kernel>
std::tuple<at::Tensor, at::Tensor> edge_dot_op(const at::Tensor& x_src, const at::Tensor& x_dst,
                                               const at::Tensor& src_index,
                                               const at::Tensor& dst_index, bool report_bad) {
  const char* op = "edge_dot";
  check_source_and_dest(op, x_src, x_dst, src_index);
  check_index_like(op, dst_index, "dst_index", 1, src_index, "src_index", x_src);
  return kernel(x_src, x_dst, at::Tensor(), src_index, dst_index, at::Tensor(), report_bad);
}

template <ForwardKernel kernel>
std::tuple<at::Tensor, at::Tensor> edge_dot_rel_op(
    const at::Tensor& x_src, const at::Tensor& x_dst, const at::Tensor& rel,
    const at::Tensor& src_index, const at::Tensor& dst_index, const at::Tensor& rel_index,
    bool report_bad) {
  const char* op = "edge_dot_rel";
  check_source_and_dest(op, x_src, x_dst, src_index);
  check_rows_like(op, rel, "rel", x_src, "x_src");
  check_index_like(op, dst_index, "dst_index", 1, src_index, "src_index", x_src);
  check_index_like(op, rel_index, "rel_index", 1, src_index, "src_index", x_src);
  return kernel(x_src, x_dst, rel, src_index, dst_index, rel_index, report_bad);
}

template <GradKernel kernel>
at::Tensor edge_dot_grad_op(const at::Tensor& grad_out, const at::Tensor& x_gather,
                            const at::Tensor& scatter_index, const at::Tensor& gather_index,
                            int64_t num_rows) {
  const char* op = "edge_dot_grad";
  check_rows(op, x_gather, "x_gather");
  check_index(op, scatter_index, "scatter_index", 1, x_gather);
  check_index_like(op, gather_index, "gather_index", 1, scatter_index, "scatter_index", x_gather);
  check_grad_out(op, grad_out, scatter_index, x_gather, "x_gather");
  check_num_rows(op, num_rows);
  return kernel(grad_out, x_gather, scatter_index, gather_index, at::Tensor(), at::Tensor(),
                num_rows);
}

// out[scatter[e]] += grad[e] * x_a[a[e]] * x_b[b[e]]: the kernel gathers x_b's rows and
// takes x_a's as the other factor.
template <GradKernel kernel>
at::Tensor edge_dot_rel_grad_op(const at::Tensor& grad_out, const at::Tensor& x_a,
                                const at::Tensor& x_b, const at::Tensor& scatter_index,
                                const at::Tensor& a_index, const at::Tensor& b_index,
                                int64_t num_rows) {
  const char* op = "edge_dot_rel_grad";
  check_rows(op, x_b, "x_b");
  check_rows_like(op, x_a, "x_a", x_b, "x_b");
  check_index(op, scatter_index, "scatter_index", 1, x_b);
  check_index_like(op, a_index, "a_index", 1, scatter_index, "scatter_index", x_b);
  check_index_like(op, b_index, "b_index", 1, scatter_index, "scatter_index", x_b);
  check_grad_out(op, grad_out, scatter_index, x_b, "x_b");
  check_num_rows(op, num_rows);
  return kernel(grad_out, x_b, scatter_index, b_index, x_a, a_index, num_rows);
}

// Both gradients of edge_dot: (x_src's, x_dst's).
using PairGradKernel = std::tuple<at::Tensor, at::Tensor> (*)(
    const at::Tensor& grad_out, const at::Tensor& x_src, const at::Tensor& x_dst,
    const at::Tensor& src_index, const at::Tensor& dst_index);

template <PairGradKernel kernel>
std::tuple<at::Tensor, at::Tensor> edge_dot_pair_grad_op(
    const at::Tensor& grad_out, const at::Tensor& x_src, const at::Tensor& x_dst,
    const at::Tensor& src_index, const at::Tensor& dst_index) {
  const char* op = "edge_dot_pair_grad";
  check_source_and_dest(op, x_src, x_dst, src_index);
  check_index_like(op, dst_index, "dst_index", 1, src_index, "src_index", x_src);
  check_grad_out(op, grad_out, src_index, x_src, "x_src", "src_index");
  return kernel(grad_out, x_src, x_dst, src_index, dst_index);
}

// The pair as two calls of the one-sided gradient: a backend with no kernel for both sides.
template <GradKernel grad>
std::tuple<at::Tensor, at::Tensor> pair_grad_by_sides(
    const at::Tensor& grad_out, const at::Tensor& x_src, const at::Tensor& x_dst,
    const at::Tensor& src_index, const at::Tensor& dst_index) {
  const at::Tensor none;
  return {grad(grad_out, x_dst, src_index, dst_index, none, none, x_src.size(0)),
          grad(grad_out, x_src, dst_index, src_index, none, none, x_dst.size(0))};
}

template <ForwardKernel forward, GradKernel grad,
          PairGradKernel pair_grad = &pair_grad_by_sides<grad>>
void impl_edge_dot_ops(torch::Library& m) {
  m.impl("edge_dot", &edge_dot_op<forward>);
  m.impl("edge_dot_grad", &edge_dot_grad_op<grad>);
  m.impl("edge_dot_pair_grad", &edge_dot_pair_grad_op<pair_grad>);
  m.impl("edge_dot_rel", &edge_dot_rel_op<forward>);
  m.impl("edge_dot_rel_grad", &edge_dot_rel_grad_op<grad>);
}

using ScoreKernel = std::tuple<at::Tensor, at::Tensor> (*)(const at::Tensor& x_src,
                                                           const at::Tensor& x_dst,
                                                           const at::Tensor& src_index,
                                                           const at::Tensor& cand_index);

using RankKernel = std::tuple<at::Tensor, at::Tensor> (*)(
    const at::Tensor& x_src, const at::Tensor& x_dst, const at::Tensor& src_index,
    const at::Tensor& pos_index, const at::Tensor& neg_index);

template <ScoreKernel kernel>
std::tuple<at::Tensor, at::Tensor> score_candidates_op(const at::Tensor& x_src,
                                                       const at::Tensor& x_dst,
                                                       const at::Tensor& src_index,
                                                       const at::Tensor& cand_index) {
  const char* op = "score_candidates";
  check_source_and_dest(op, x_src, x_dst, src_index);
  check_index_like(op, cand_index, "cand_index", 2, src_index, "src_index", x_src);
  return kernel(x_src, x_dst, src_index, cand_index);
}

template <RankKernel kernel>
std::tuple<at::Tensor, at::Tensor> rank_candidates_op(
    const at::Tensor& x_src, const at::Tensor& x_dst, const at::Tensor& src_index,
    const at::Tensor& pos_index, const at::Tensor& neg_index) {
  const char* op = "rank_candidates";
  check_source_and_dest(op, x_src, x_dst, src_index);
  check_index_like(op, pos_index, "pos_index", 1, src_index, "src_index", x_src);
  check_index_like(op, neg_index, "neg_index", 2, src_index, "src_index", x_src);
  return kernel(x_src, x_dst, src_index, pos_index, neg_index);
}

template <ScoreKernel score, RankKernel rank>
void impl_candidate_ops(torch::Library& m) {
  m.impl("score_candidates", &score_candidates_op<score>);
  m.impl("rank_candidates", &rank_candidates_op<rank>);
}

}  // namespace pyg_edgedot
