// What the CPU and CUDA kernels of edge_dot_loss share: the negatives' counter-based generator
// and the loss terms, per element, as __host__ __device__ inline functions, and both ops' host
// entry points (the checks at their boundary, the copies the kernels read). The generator is
// the one pyg_edgedot/ops/edge_dot_loss.py's docstring defines (and implements in torch ops,
// the composite fallback): the kernels must draw exactly its negatives, bit for bit, so tests
// compare them with loss_negatives.
#pragma once

#include <ATen/ATen.h>
#include <torch/library.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <tuple>

#include "check.h"
#include "common.h"
#include "counter_rng.h"

namespace pyg_edgedot {
namespace loss {

using rng::kGamma;
using rng::mix64;

// u in [0, 1) of counter c = e * K + k: output c of splitmix64 seeded with mix64(seed), whose
// stream key is `key` = mix64(seed); 53 bits, exact in float64.
PYG_EDGEDOT_HD double uniform(uint64_t key, int64_t counter) {
  const uint64_t bits = mix64(key + (static_cast<uint64_t>(counter) + 1) * kGamma);
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

// min(floor(u * m), m - 1) with u * m one float64 multiply (m = 0 gives -1, as the Python
// side does, for a source without negatives when validation is off).
PYG_EDGEDOT_HD int64_t scaled(double u, int64_t m) {
  const int64_t r = static_cast<int64_t>(PYG_EDGEDOT_MATH(floor)(u * static_cast<double>(m)));
  return r < m - 1 ? r : m - 1;
}

// The bucket index over adj (counter_rng.h's, shared with negative_sample's CUDA kernel).
using rng::AdjIndex;
using rng::kAdjIndexMinKeys;
using rng::plan_adj_index;
using rng::rank_to_key;

// floor(a / b) and a - b * floor(a / b) (Python's // and %, which the composite uses, so
// negative keys of out-of-range sources decode alike), b >= 1: a float64 estimate of the
// quotient corrected exactly (64-bit integer division is slow on both devices).
PYG_EDGEDOT_HD void floor_divmod(int64_t a, int64_t b, double inverse, int64_t& q, int64_t& r) {
  q = static_cast<int64_t>(static_cast<double>(a) * inverse);
  r = a - q * b;
  while (r < 0) {
    --q;
    r += b;
  }
  while (r >= b) {
    ++q;
    r -= b;
  }
}

// Where a call's negatives come from: the op's arguments after `seed`.
struct Space {
  const int64_t* adj;      // [A] excluded adj, sorted
  const int64_t* row_ptr;  // [N_src + 1] excluded keys before each source's row, or null
  int64_t num_adj;
  AdjIndex adj_index;      // bucket null: plain binary searches
  int64_t num_negatives;   // K
  int64_t num_src, num_dst;
  int64_t width;           // keys per source row: N_dst, or N_dst - 1 without self-loops
  double inverse_width;
  int64_t num_ranks;       // N_src * width - A: the complement's size
  uint64_t key;            // mix64(seed)
  bool self_loops, structured;
};

// Decodes a key of the directed (self_loops) or no-loops key space.
PYG_EDGEDOT_HD void decode(const Space& sp, int64_t key, int64_t& src, int64_t& dst) {
  int64_t col;
  floor_divmod(key, sp.width, sp.inverse_width, src, col);
  dst = (!sp.self_loops && col >= src) ? col + 1 : col;
}

// The three steps of a negative, which the CPU kernels interleave over a block of pairs (so
// the cache misses of many overlap): its rank in the complement, the rank as a key (see
// rank_to_key), the key as a pair. Negative k of positive e whose source is `pos_src`:
PYG_EDGEDOT_HD int64_t negative_rank(const Space& sp, int64_t e, int64_t k, int64_t pos_src) {
  const double u = uniform(sp.key, e * sp.num_negatives + k);
  if (!sp.structured) return scaled(u, sp.num_ranks);
  if (sp.row_ptr == nullptr) return pos_src * sp.width + scaled(u, sp.width);
  // A source out of range (reported by first_bad) reads a clamped row, never past it.
  const int64_t row = pos_src < 0 ? 0 : (pos_src >= sp.num_src ? sp.num_src - 1 : pos_src);
  const int64_t before = sp.row_ptr[row], after = sp.row_ptr[row + 1];
  return row * sp.width - before + scaled(u, sp.width - (after - before));
}

PYG_EDGEDOT_HD void negative_pair(const Space& sp, int64_t key, int64_t pos_src, int64_t& src,
                                  int64_t& dst) {
  int64_t decoded_src;
  decode(sp, key, decoded_src, dst);
  src = sp.structured ? pos_src : decoded_src;  // structured: the positive's source is kept
}

PYG_EDGEDOT_HD void negative(const Space& sp, int64_t e, int64_t k, int64_t pos_src,
                             int64_t& src, int64_t& dst) {
  const int64_t rank = negative_rank(sp, e, k, pos_src);
  negative_pair(sp, rank_to_key(sp.adj, sp.num_adj, sp.adj_index, rank), pos_src, src, dst);
}

// ---------------------------------------------------------------------------------------
// The loss terms, in opmath (float, or double for float64)
// ---------------------------------------------------------------------------------------

// softplus(z) = max(z, 0) + log1p(exp(-|z|)) (exact for every z, as the composite's) and
// sigmoid(z), from one exp: with t = exp(-|z|), sigmoid(z) = 1 / (1 + t) for z >= 0 and
// t / (1 + t) below (within an ulp or two of torch.sigmoid's).
template <typename T>
PYG_EDGEDOT_HD void softplus_sigmoid(T z, T& softplus, T& sigmoid) {
  const T t = PYG_EDGEDOT_MATH(exp)(-PYG_EDGEDOT_MATH(fabs)(z));
  softplus = (z > T(0) ? z : T(0)) + PYG_EDGEDOT_MATH(log1p)(t);
  const T inv = T(1) / (T(1) + t);
  sigmoid = z >= T(0) ? inv : t * inv;
}

enum class Loss { kBce, kBpr };

// One positive's terms: scores [1 + K] (the positive, then its negatives) in, dloss/dscore
// (before the reduction) out, in the scores' place if `grad` is `scores`; returns the sum of
// its terms. BCE: label 1 softplus(-s), d/ds = -sigmoid(-s); label 0 softplus(s),
// d/ds = sigmoid(s). BPR: -log sigmoid(pos - neg) = softplus(neg - pos), the positive's
// derivative minus the sum of its negatives'.
template <typename acc_t, typename in_t, typename out_t>
PYG_EDGEDOT_HD acc_t positive_terms(Loss loss, const in_t* scores, out_t* grad, int64_t width) {
  const acc_t pos = static_cast<acc_t>(scores[0]);
  acc_t sum = 0, term, g;
  if (loss == Loss::kBce) {
    softplus_sigmoid(-pos, term, g);
    sum += term;
    grad[0] = static_cast<out_t>(-g);
    for (int64_t j = 1; j < width; ++j) {
      softplus_sigmoid(static_cast<acc_t>(scores[j]), term, g);
      sum += term;
      grad[j] = static_cast<out_t>(g);
    }
    return sum;
  }
  acc_t pos_grad = 0;
  for (int64_t j = 1; j < width; ++j) {
    softplus_sigmoid(static_cast<acc_t>(scores[j]) - pos, term, g);
    sum += term;
    grad[j] = static_cast<out_t>(g);
    pos_grad += g;
  }
  grad[0] = static_cast<out_t>(-pos_grad);
  return sum;
}

// Terms over the 1 + K pairs of a count `num_terms` each positive adds to the mean.
inline int64_t terms_per_positive(Loss loss, int64_t num_negatives) {
  return num_negatives + (loss == Loss::kBce ? 1 : 0);
}

// ---------------------------------------------------------------------------------------
// Host: the arguments of both ops, checked at their boundary (for direct callers of
// torch.ops.pyg_edgedot; the Python wrapper checks first and raises the errors users see)
// ---------------------------------------------------------------------------------------

struct Options {
  bool structured;
  Loss loss;
  bool mean;
};

inline Options parse_options(const char* op, c10::string_view negatives, c10::string_view loss,
                             c10::string_view reduction) {
  PYG_EDGEDOT_CHECK(negatives == "structured" || negatives == "uniform", op,
                    ": negatives must be 'structured' or 'uniform'");
  PYG_EDGEDOT_CHECK(loss == "bce" || loss == "bpr", op, ": loss must be 'bce' or 'bpr'");
  PYG_EDGEDOT_CHECK(reduction == "mean" || reduction == "sum", op,
                    ": reduction must be 'mean' or 'sum'");
  return Options{negatives == "structured", loss == "bce" ? Loss::kBce : Loss::kBpr,
                 reduction == "mean"};
}

// The space of the op's arguments; excluded_adj and row_ptr must stay alive (contiguous
// copies are the caller's). The seed is read by the caller (a device seed stays there).
inline Space make_space(const char* op, const at::Tensor& x_src, const at::Tensor& x_dst,
                        const at::Tensor& src_index, const at::Tensor& dst_index,
                        const at::Tensor& seed, const at::Tensor& excluded_adj,
                        const at::Tensor& row_ptr, int64_t num_negatives, int64_t num_src_nodes,
                        int64_t num_dst_nodes, bool self_loops, bool structured) {
  PYG_EDGEDOT_CHECK(x_src.dim() == 2 && x_dst.dim() == 2, op, ": x_src and x_dst must be 2-D");
  PYG_EDGEDOT_CHECK(x_dst.scalar_type() == x_src.scalar_type() &&
                        x_dst.device() == x_src.device() && x_dst.size(1) == x_src.size(1),
                    op, ": x_dst must have the dtype, device and feature dimension of x_src");
  PYG_EDGEDOT_CHECK(src_index.dim() == 1 && dst_index.dim() == 1 &&
                        src_index.size(0) == dst_index.size(0) &&
                        src_index.scalar_type() == dst_index.scalar_type() &&
                        src_index.device() == x_src.device() &&
                        dst_index.device() == x_src.device(),
                    op, ": src_index and dst_index must be 1-D of one length and dtype, on ",
                    x_src.device());
  PYG_EDGEDOT_CHECK(seed.dim() == 0 && seed.scalar_type() == at::kLong &&
                        (seed.device().is_cpu() || seed.device() == x_src.device()),
                    op, ": seed must be a 0-dim int64 tensor on the CPU or ", x_src.device());
  for (const at::Tensor* t : {&excluded_adj, &row_ptr}) {
    PYG_EDGEDOT_CHECK(
        t->dim() == 1 && t->scalar_type() == at::kLong && t->device() == x_src.device(), op,
        ": excluded_adj and row_ptr must be 1-D int64 on ", x_src.device());
  }
  PYG_EDGEDOT_CHECK(num_negatives >= 1, op, ": num_negatives must be >= 1");
  PYG_EDGEDOT_CHECK(num_src_nodes >= 1 && num_src_nodes <= x_src.size(0) && num_dst_nodes >= 1 &&
                        num_dst_nodes <= x_dst.size(0),
                    op, ": num_src_nodes and num_dst_nodes must be >= 1 and at most the rows of "
                    "x_src and x_dst");
  PYG_EDGEDOT_CHECK(row_ptr.numel() == 0 || row_ptr.numel() == num_src_nodes + 1, op,
                    ": row_ptr must be empty or [num_src_nodes + 1]");
  const int64_t width = self_loops ? num_dst_nodes : num_dst_nodes - 1;
  PYG_EDGEDOT_CHECK(width >= 1 && num_src_nodes <= (int64_t{1} << 62) / width, op,
                    ": too few or too many candidate pairs");
  const int64_t num_keys = num_src_nodes * width;
  PYG_EDGEDOT_CHECK(excluded_adj.numel() < num_keys, op,
                    ": no candidate pair is left to draw negatives from");
  Space sp;
  sp.adj = nullptr;
  sp.row_ptr = nullptr;
  sp.adj_index = AdjIndex{nullptr, 0, 0};
  sp.num_adj = excluded_adj.numel();
  sp.num_negatives = num_negatives;
  sp.num_src = num_src_nodes;
  sp.num_dst = num_dst_nodes;
  sp.width = width;
  sp.inverse_width = 1.0 / static_cast<double>(width);
  sp.num_ranks = num_keys - excluded_adj.numel();
  sp.key = 0;
  sp.self_loops = self_loops;
  sp.structured = structured;
  return sp;
}

// edge_dot_loss_grad's own arguments: grad_loss a 0-dim tensor and score_grad [E, 1 + K] in
// x_src's dtype, both on x_src's device.
inline void check_grad_args(const char* op, const at::Tensor& grad_loss,
                            const at::Tensor& score_grad, const at::Tensor& x_src,
                            int64_t num_edges, int64_t width) {
  PYG_EDGEDOT_CHECK(grad_loss.dim() == 0 && grad_loss.device() == x_src.device(), op,
                    ": grad_loss must be a 0-dim tensor on ", x_src.device());
  PYG_EDGEDOT_CHECK(score_grad.dim() == 2 && score_grad.size(0) == num_edges &&
                        score_grad.size(1) == width &&
                        score_grad.scalar_type() == x_src.scalar_type() &&
                        score_grad.device() == x_src.device(),
                    op, ": score_grad must be [E, 1 + num_negatives] in x_src's dtype and device");
}

// A call's arguments as both backends' kernels read them, after the checks above: the
// options, the space (pointers, adj index and key unset: each backend sets them), and the
// copies the kernels need, which must outlive the kernels.
struct Call {
  Options options;
  Space space;
  at::Tensor x_src, x_dst;                // unit column stride
  at::Tensor src_index, dst_index, seed;  // as given
  at::Tensor adj, row_ptr;                // contiguous
  at::Tensor adj_index;   // the caller's kept bucket index (as given), or undefined
  at::Tensor grad_loss;   // edge_dot_loss_grad: as given; undefined for edge_dot_loss
  at::Tensor score_grad;  // edge_dot_loss_grad: contiguous; undefined for edge_dot_loss
  int64_t num_edges;
  int64_t width;      // 1 + num_negatives: the pairs of a positive
  int64_t num_terms;  // num_edges * terms_per_positive: what "mean" divides by
};

// Both ops' host prelude: edge_dot_loss with grad_loss and score_grad null,
// edge_dot_loss_grad with its own two arguments.
inline Call prepare_call(const char* op, const at::Tensor& x_src, const at::Tensor& x_dst,
                         const at::Tensor& src_index, const at::Tensor& dst_index,
                         const at::Tensor& seed, const at::Tensor& excluded_adj,
                         const at::Tensor& row_ptr, int64_t num_negatives,
                         int64_t num_src_nodes, int64_t num_dst_nodes, bool self_loops,
                         c10::string_view negatives, c10::string_view loss,
                         c10::string_view reduction,
                         const std::optional<at::Tensor>& adj_index,
                         const at::Tensor* grad_loss = nullptr,
                         const at::Tensor* score_grad = nullptr) {
  Call call;
  call.options = parse_options(op, negatives, loss, reduction);
  call.space = make_space(op, x_src, x_dst, src_index, dst_index, seed, excluded_adj, row_ptr,
                          num_negatives, num_src_nodes, num_dst_nodes, self_loops,
                          call.options.structured);
  call.num_edges = src_index.size(0);
  call.width = 1 + num_negatives;
  call.num_terms = call.num_edges * terms_per_positive(call.options.loss, num_negatives);
  if (score_grad != nullptr) {
    check_grad_args(op, *grad_loss, *score_grad, x_src, call.num_edges, call.width);
  }
  call.x_src = unit_column_stride(x_src);
  call.x_dst = unit_column_stride(x_dst);
  call.src_index = src_index;
  call.dst_index = dst_index;
  call.seed = seed;
  if (score_grad != nullptr) {
    call.grad_loss = *grad_loss;
    call.score_grad = score_grad->contiguous();
  }
  call.adj = excluded_adj.contiguous();
  call.row_ptr = row_ptr.contiguous();
  if (adj_index.has_value()) call.adj_index = *adj_index;  // each backend checks its size
  return call;
}

// ---------------------------------------------------------------------------------------
// Op entry points: the prelude, then a backend's kernel. A backend registers its kernels with
// impl_loss_ops (as common.h's impl_edge_dot_ops), so both backends check alike.
// ---------------------------------------------------------------------------------------

// edge_dot_loss: (loss, first_bad, score_grad).
using LossKernel = std::tuple<at::Tensor, at::Tensor, at::Tensor> (*)(const Call& call);

// edge_dot_loss_grad: (grad_src, grad_dst), each [0, D] unless asked for.
using LossGradKernel = std::tuple<at::Tensor, at::Tensor> (*)(const Call& call, bool needs_src,
                                                             bool needs_dst);

template <LossKernel kernel>
std::tuple<at::Tensor, at::Tensor, at::Tensor> edge_dot_loss_op(
    const at::Tensor& x_src, const at::Tensor& x_dst, const at::Tensor& src_index,
    const at::Tensor& dst_index, const at::Tensor& seed, const at::Tensor& excluded_adj,
    const at::Tensor& row_ptr, int64_t num_negatives, int64_t num_src_nodes,
    int64_t num_dst_nodes, bool self_loops, c10::string_view negatives, c10::string_view loss,
    c10::string_view reduction, const std::optional<at::Tensor>& adj_index) {
  return kernel(prepare_call("edge_dot_loss", x_src, x_dst, src_index, dst_index, seed,
                             excluded_adj, row_ptr, num_negatives, num_src_nodes, num_dst_nodes,
                             self_loops, negatives, loss, reduction, adj_index));
}

template <LossGradKernel kernel>
std::tuple<at::Tensor, at::Tensor> edge_dot_loss_grad_op(
    const at::Tensor& grad_loss, const at::Tensor& score_grad, const at::Tensor& x_src,
    const at::Tensor& x_dst, const at::Tensor& src_index, const at::Tensor& dst_index,
    const at::Tensor& seed, const at::Tensor& excluded_adj, const at::Tensor& row_ptr,
    int64_t num_negatives, int64_t num_src_nodes, int64_t num_dst_nodes, bool self_loops,
    c10::string_view negatives, c10::string_view loss, c10::string_view reduction,
    bool needs_src, bool needs_dst, const std::optional<at::Tensor>& adj_index) {
  return kernel(prepare_call("edge_dot_loss_grad", x_src, x_dst, src_index, dst_index, seed,
                             excluded_adj, row_ptr, num_negatives, num_src_nodes, num_dst_nodes,
                             self_loops, negatives, loss, reduction, adj_index, &grad_loss,
                             &score_grad),
                needs_src, needs_dst);
}

template <LossKernel forward, LossGradKernel grad>
void impl_loss_ops(torch::Library& m) {
  m.impl("edge_dot_loss", &edge_dot_loss_op<forward>);
  m.impl("edge_dot_loss_grad", &edge_dot_loss_grad_op<grad>);
}

}  // namespace loss
}  // namespace pyg_edgedot
