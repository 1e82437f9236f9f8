// CPU kernels of candidate scoring and ranking: parallel over source rows (at::parallel_for);
// each source row is dotted with its K candidate rows by row_dot.h's row_dot, four candidates
// at a time in its AVX2 / AVX-512 forms where the CPU has them, so a candidate's score is
// edge_dot's score of that pair, bit for bit, under every ISA.
// Traffic: N * D source + N * K * D candidate elements read, N * K scores (or N ranks) written.
#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <limits>
#include <type_traits>

#include "common.h"
#include "first_bad.h"
#include "prefetch.h"
#include "row_dot.h"

namespace pyg_edgedot {

namespace {

// The candidate rows: prefetch(cands, stride, k, count) asks for the row of the candidate a
// few places after k in this source's list (see prefetch.h), if there is one in range.
template <typename scalar_t>
struct CandidateRows {
  const scalar_t* rows;
  int64_t row_stride, num_rows, row_bytes, distance;

  CandidateRows(const scalar_t* rows, int64_t row_stride, int64_t num_rows, int64_t feat_dim)
      : rows(rows), row_stride(row_stride), num_rows(num_rows),
        row_bytes(feat_dim * static_cast<int64_t>(sizeof(scalar_t))),
        distance(prefetch_distance(row_bytes)) {}

  template <typename index_t>
  PYG_EDGEDOT_INLINE void prefetch(const index_t* cands, int64_t stride, int64_t k,
                                   int64_t count) const {
    const int64_t ahead = k + distance;
    if (ahead >= count) return;
    const int64_t c = static_cast<int64_t>(cands[ahead * stride]);
    if (c >= 0 && c < num_rows) prefetch_lines(rows + c * row_stride, row_bytes);
  }
};

inline int64_t grain_rows(int64_t num_cand, int64_t feat_dim) {
  return std::max<int64_t>(1, 32768 / std::max<int64_t>(1, (num_cand + 1) * feat_dim));
}

// What a task needs to score its source rows' candidates (score_candidates: `cand_ptr` the
// [N, K] candidates, `out` their scores; rank_candidates: `cand_ptr` the negatives, `pos_ptr`
// the positives, `rank` the ranks).
template <typename scalar_t, typename index_t>
struct CandidateArgs {
  const scalar_t* src_rows;  // [N_src, D], row stride
  const index_t* src_ptr;    // [N], strided
  const index_t* pos_ptr;    // [N], strided (ranks)
  const index_t* cand_ptr;   // [N, K], strided
  scalar_t* out;             // [N, K] (scores)
  float* rank;               // [N] (ranks)
  int64_t src_row_stride, src_stride, pos_stride, cand_stride0, cand_stride1;
  int64_t num_src, num_cand, feat_dim;
  CandidateRows<scalar_t> cand_rows;
  std::atomic<int64_t>* first_bad;
};

// Visits candidates [0, count) of one source row `a`, in order: take(k, score) with the score
// rounded to the rows' dtype, or bad(k) for an index out of range. Dots: one candidate at a
// time (row_dot), or four (row_dot.h's four-pair forms, the same bits); a group of four with
// an index out of range, and the last count % 4, go one at a time.
template <typename Dots, typename scalar_t, typename index_t, typename Take, typename Bad>
PYG_EDGEDOT_INLINE void visit_candidates(const scalar_t* a, const index_t* cands, int64_t stride,
                                         int64_t count, const CandidateRows<scalar_t>& rows,
                                         int64_t feat_dim, Take take, Bad bad) {
  using acc_t = at::opmath_type<scalar_t>;
  const uint64_t num_rows = static_cast<uint64_t>(rows.num_rows);
  // Candidate k's index as unsigned: one compare tells a negative index too.
  auto cand_of = [&](int64_t k) {
    return static_cast<uint64_t>(static_cast<int64_t>(cands[k * stride]));
  };
  auto one = [&](int64_t k) {
    const uint64_t c = cand_of(k);
    if (c >= num_rows) {
      bad(k);
      return;
    }
    take(k, static_cast<scalar_t>(row_dot<scalar_t, acc_t>(
                a, rows.rows + static_cast<int64_t>(c) * rows.row_stride, feat_dim)));
  };
  int64_t k = 0;
  if constexpr (!std::is_same_v<Dots, OnePairAtATime>) {
    const scalar_t* as[4] = {a, a, a, a};
    for (; k + 4 <= count; k += 4) {
      for (int j = 0; j < 4; ++j) rows.prefetch(cands, stride, k + j, count);
      const scalar_t* bs[4];
      bool any_bad = false;
      for (int j = 0; j < 4; ++j) {
        const uint64_t c = cand_of(k + j);
        any_bad |= c >= num_rows;
        bs[j] = c < num_rows ? rows.rows + static_cast<int64_t>(c) * rows.row_stride : rows.rows;
      }
      if (any_bad) {
        for (int j = 0; j < 4; ++j) one(k + j);
        continue;
      }
      scalar_t four[4];
      Dots::score4(as, bs, feat_dim, four);
      for (int j = 0; j < 4; ++j) take(k + j, four[j]);
    }
  }
  for (; k < count; ++k) {
    rows.prefetch(cands, stride, k, count);
    one(k);
  }
}

// Source rows [begin, end) of score_candidates: a row whose source or candidate is out of
// range gets NaN there and lowers first_bad.
struct ScoreRows {
  template <typename Dots, typename scalar_t, typename index_t>
  static inline void run(const CandidateArgs<scalar_t, index_t>& p, int64_t begin, int64_t end) {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t nan = static_cast<scalar_t>(std::numeric_limits<acc_t>::quiet_NaN());
    for (int64_t n = begin; n < end; ++n) {
      const int64_t s = static_cast<int64_t>(p.src_ptr[n * p.src_stride]);
      scalar_t* out_row = p.out + n * p.num_cand;
      if (s < 0 || s >= p.num_src) {
        std::fill(out_row, out_row + p.num_cand, nan);
        record_bad_row(*p.first_bad, n);
        continue;
      }
      bool row_bad = false;
      visit_candidates<Dots>(
          p.src_rows + s * p.src_row_stride, p.cand_ptr + n * p.cand_stride0, p.cand_stride1,
          p.num_cand, p.cand_rows, p.feat_dim,
          [&](int64_t k, scalar_t score) { out_row[k] = score; },
          [&](int64_t k) {
            out_row[k] = nan;
            row_bad = true;
          });
      if (row_bad) record_bad_row(*p.first_bad, n);
    }
  }
};

// Source rows [begin, end) of rank_candidates: the positive and the K negatives scored as
// score_candidates scores them (rounded to the input dtype), and counted; nothing of size K
// is kept. A row with an index out of range gets NaN and lowers first_bad.
struct RankRows {
  template <typename Dots, typename scalar_t, typename index_t>
  static inline void run(const CandidateArgs<scalar_t, index_t>& p, int64_t begin, int64_t end) {
    using acc_t = at::opmath_type<scalar_t>;
    const CandidateRows<scalar_t>& rows = p.cand_rows;
    for (int64_t n = begin; n < end; ++n) {
      const int64_t s = static_cast<int64_t>(p.src_ptr[n * p.src_stride]);
      const int64_t q = static_cast<int64_t>(p.pos_ptr[n * p.pos_stride]);
      bool row_bad = s < 0 || s >= p.num_src || q < 0 || q >= rows.num_rows;
      int64_t greater = 0, greater_equal = 0;
      if (!row_bad && p.num_cand > 0) {
        const scalar_t* a = p.src_rows + s * p.src_row_stride;
        const acc_t pos = static_cast<acc_t>(static_cast<scalar_t>(
            row_dot<scalar_t, acc_t>(a, rows.rows + q * rows.row_stride, p.feat_dim)));
        visit_candidates<Dots>(
            a, p.cand_ptr + n * p.cand_stride0, p.cand_stride1, p.num_cand, rows, p.feat_dim,
            [&](int64_t, scalar_t score) {
              const acc_t neg = static_cast<acc_t>(score);
              greater += neg > pos;
              greater_equal += neg >= pos;
            },
            [&](int64_t) { row_bad = true; });
      }
      if (row_bad) {
        p.rank[n] = std::numeric_limits<float>::quiet_NaN();
        record_bad_row(*p.first_bad, n);
      } else {
        // OGB: 0.5 * (optimistic + pessimistic) + 1, in float32.
        p.rank[n] = 0.5f * static_cast<float>(greater + greater_equal) + 1.0f;
      }
    }
  }
};

// The loop (ScoreRows or RankRows) for this CPU and dtype (row_dot.h's IsaClones): four
// candidates at a time in AVX-512 or AVX2, one at a time for double rows. Measured on an Intel
// Xeon (2026-12-05, 2,000 sources x 500 candidates of 100,000 rows, 2 threads, min of 7-9
// calls, each form in its own process): D = 128 fp32, AVX2 one at a time 20.2-25.5 ms, four at
// a time 17.0; AVX-512 four at a time 15.8-15.9 (14.0 against torch.compile's 14.2-15.5 in one
// process, the previous eight-sum loop 18.6-21.2); without the candidate-row prefetch
// 15.8-17.2. D = 64: 5.7-5.8 (compile 6.0-6.3, before 6.9-7.0); D = 100: 11.1 (14.0-14.5,
// 13.2-13.4); bf16, D = 128: 9.1-9.3 (15.5-16.6, 12.6-12.8).
template <typename Rows, typename scalar_t, typename index_t>
auto candidate_loop() {
  using Clones =
      IsaClones<Rows, void(const CandidateArgs<scalar_t, index_t>&, int64_t, int64_t)>;
  return Clones::template pick<scalar_t, /*kFourInAvx2=*/true>();
}

template <typename scalar_t, typename index_t>
CandidateArgs<scalar_t, index_t> candidate_args(const at::Tensor& x_src, const at::Tensor& x_dst,
                                                const at::Tensor& src_index,
                                                const at::Tensor& cand_index,
                                                std::atomic<int64_t>& first_bad) {
  const int64_t feat_dim = x_src.size(1);
  return CandidateArgs<scalar_t, index_t>{
      x_src.const_data_ptr<scalar_t>(), src_index.const_data_ptr<index_t>(), nullptr,
      cand_index.const_data_ptr<index_t>(), nullptr, nullptr, x_src.stride(0),
      src_index.stride(0), 0, cand_index.stride(0), cand_index.stride(1), x_src.size(0),
      cand_index.size(1), feat_dim,
      CandidateRows<scalar_t>{x_dst.const_data_ptr<scalar_t>(), x_dst.stride(0), x_dst.size(0),
                              feat_dim},
      &first_bad};
}

template <typename scalar_t, typename index_t>
void score_candidates_cpu_impl(const at::Tensor& x_src, const at::Tensor& x_dst,
                               const at::Tensor& src_index, const at::Tensor& cand_index,
                               at::Tensor& out, std::atomic<int64_t>& first_bad) {
  auto p = candidate_args<scalar_t, index_t>(x_src, x_dst, src_index, cand_index, first_bad);
  p.out = out.mutable_data_ptr<scalar_t>();
  const auto loop = candidate_loop<ScoreRows, scalar_t, index_t>();
  at::parallel_for(0, out.size(0), grain_rows(p.num_cand, p.feat_dim),
                   [&](int64_t begin, int64_t end) { loop(p, begin, end); });
}

std::tuple<at::Tensor, at::Tensor> score_candidates_cpu(const at::Tensor& x_src_in,
                                                        const at::Tensor& x_dst_in,
                                                        const at::Tensor& src_index,
                                                        const at::Tensor& cand_index) {
  const at::Tensor x_src = unit_column_stride(x_src_in);
  const at::Tensor x_dst = unit_column_stride(x_dst_in);
  at::Tensor out = at::empty({cand_index.size(0), cand_index.size(1)}, x_src.options());
  std::atomic<int64_t> first_bad{kNoBadRow};
  if (src_index.size(0) > 0) {
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x_src.scalar_type(), "score_candidates_cpu", [&] {
      AT_DISPATCH_INDEX_TYPES(src_index.scalar_type(), "score_candidates_cpu", [&] {
        score_candidates_cpu_impl<scalar_t, index_t>(x_src, x_dst, src_index, cand_index, out,
                                                     first_bad);
      });
    });
  }
  return {out, first_bad_tensor(first_bad, src_index)};
}

template <typename scalar_t, typename index_t>
void rank_candidates_cpu_impl(const at::Tensor& x_src, const at::Tensor& x_dst,
                              const at::Tensor& src_index, const at::Tensor& pos_index,
                              const at::Tensor& neg_index, at::Tensor& rank,
                              std::atomic<int64_t>& first_bad) {
  auto p = candidate_args<scalar_t, index_t>(x_src, x_dst, src_index, neg_index, first_bad);
  p.pos_ptr = pos_index.const_data_ptr<index_t>();
  p.pos_stride = pos_index.stride(0);
  p.rank = rank.mutable_data_ptr<float>();
  const auto loop = candidate_loop<RankRows, scalar_t, index_t>();
  at::parallel_for(0, src_index.size(0), grain_rows(p.num_cand, p.feat_dim),
                   [&](int64_t begin, int64_t end) { loop(p, begin, end); });
}

std::tuple<at::Tensor, at::Tensor> rank_candidates_cpu(
    const at::Tensor& x_src_in, const at::Tensor& x_dst_in, const at::Tensor& src_index,
    const at::Tensor& pos_index, const at::Tensor& neg_index) {
  const at::Tensor x_src = unit_column_stride(x_src_in);
  const at::Tensor x_dst = unit_column_stride(x_dst_in);
  at::Tensor rank = at::empty({src_index.size(0)}, x_src.options().dtype(at::kFloat));
  std::atomic<int64_t> first_bad{kNoBadRow};
  if (src_index.size(0) > 0) {
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x_src.scalar_type(), "rank_candidates_cpu", [&] {
      AT_DISPATCH_INDEX_TYPES(src_index.scalar_type(), "rank_candidates_cpu", [&] {
        rank_candidates_cpu_impl<scalar_t, index_t>(x_src, x_dst, src_index, pos_index,
                                                    neg_index, rank, first_bad);
      });
    });
  }
  return {rank, first_bad_tensor(first_bad, src_index)};
}

}  // namespace

TORCH_LIBRARY_IMPL(pyg_edgedot, CPU, m) {
  impl_candidate_ops<&score_candidates_cpu, &rank_candidates_cpu>(m);
}

}  // namespace pyg_edgedot
