// What the CPU and CUDA kernels of negative_sample share (schema in
// csrc/negative_sampling.cpp): the argument checks, the counter-based generator, the per-element
// math (rank -> key, the Fisher-Yates targets and buckets of the permutation, key -> pair) and
// the sizes of the draw's rounds. The per-element functions are __host__ __device__, so the
// CPU kernel (and its tests) run the very code the CUDA kernel runs, and for the same
// arguments both kernels compute the same numbers: the same draws, bit for bit.
#pragma once

#include <ATen/ATen.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "check.h"
#include "counter_rng.h"

namespace pyg_edgedot {
namespace negsample {

using rng::AdjIndex;
using rng::check_adj_index;
using rng::kGamma;
using rng::mix64;
using rng::rank_to_key;  // rank r of the complement -> its key r + #{i : adj_i <= r}
using rng::upper_bound;
constexpr uint64_t kStreamStep = 0xD1B54A32D192ED03ULL;  // odd: distinct stream keys
constexpr uint64_t kRankStream = 0, kBucketStream = 1, kShuffleStream = 2;
constexpr int64_t kInCacheShuffle = 1 << 16;             // keys Fisher-Yates shuffles directly
constexpr int64_t kBucketTarget = 1 << 12;               // keys per bucket of the permutation
constexpr int kMaxTopUpRounds = 64;  // each round adds >= 1 rank with prob. > 1 - 4^-8

// a * b as 128 bits: returns the high word, stores the low one.
PYG_EDGEDOT_HD uint64_t mul_wide(uint64_t a, uint64_t b, uint64_t& low) {
#if defined(__CUDA_ARCH__)
  low = a * b;
  return __umul64hi(a, b);
#else
  const unsigned __int128 product = static_cast<unsigned __int128>(a) * b;
  low = static_cast<uint64_t>(product);
  return static_cast<uint64_t>(product >> 64);
#endif
}

// splitmix64 by counter: output c of stream s is
//   mix64(key_s + (c + 1) * kGamma),  key_s = mix64(mix64(seed) + s * kStreamStep).
struct Stream {
  uint64_t key;

  PYG_EDGEDOT_HD Stream(int64_t seed, uint64_t stream)
      : key(mix64(mix64(static_cast<uint64_t>(seed)) + stream * kStreamStep)) {}

  PYG_EDGEDOT_HD uint64_t bits(uint64_t counter) const {
    return mix64(key + (counter + 1) * kGamma);
  }

  // Uniform in [0, m), m >= 1: the high word of bits * m, rejecting the low words below
  // 2^64 mod m (Lemire, "Fast random integer generation in an interval", 2019). A rejected
  // draw (probability < m / 2^64) retries from stream keys derived from `key`.
  PYG_EDGEDOT_HD uint64_t below(uint64_t counter, uint64_t m) const {
    uint64_t low;
    uint64_t high = mul_wide(bits(counter), m, low);
    if (low < m) {
      const uint64_t threshold = (0 - m) % m;
      for (uint64_t attempt = 1; low < threshold; ++attempt) {
        const uint64_t retry_key = mix64(key ^ (attempt * kStreamStep));
        high = mul_wide(mix64(retry_key + (counter + 1) * kGamma), m, low);
      }
    }
    return high;
  }
};

// The permutation's Fisher-Yates step at position p of a run [.., end) swaps p with this
// position of [p, end), drawn at counter p of the shuffle stream.
PYG_EDGEDOT_HD int64_t fisher_yates_target(const Stream& shuffle, int64_t p, int64_t end) {
  return p + static_cast<int64_t>(shuffle.below(static_cast<uint64_t>(p),
                                                static_cast<uint64_t>(end - p)));
}

// The permutation's bucket of position i (of 2^(64 - drop) buckets), from the bucket stream.
PYG_EDGEDOT_HD uint64_t bucket_of(const Stream& label, int64_t i, int drop) {
  return label.bits(static_cast<uint64_t>(i)) >> drop;
}

// ---------------------------------------------------------------------------------------
// Keys -> pairs (the three key spaces of pyg_edgedot/ops/negative_sampling.py)
// ---------------------------------------------------------------------------------------

enum class Mode { kDirected, kNoLoops, kUndirected };

// floor(a / b) for 0 <= a < 2^62, b >= 1: a float64 estimate, exact division only where the
// estimate is off (64-bit division is ~10x slower).
PYG_EDGEDOT_HD int64_t divide(int64_t a, int64_t b, double inverse) {
  const int64_t q = static_cast<int64_t>(static_cast<double>(a) * inverse);
  const int64_t rest = a - q * b;
  return (rest >= 0 && rest < b) ? q : a / b;
}

// First key of row i of the strict upper triangle of n nodes: i * (2n - i - 1) / 2, without
// overflow (one factor is even).
PYG_EDGEDOT_HD int64_t tri_row_start(int64_t row, int64_t n) {
  const int64_t other = 2 * n - row - 1;
  return row % 2 == 0 ? (row / 2) * other : row * (other / 2);
}

// Pairs -> keys (excluded_edge_keys): the key of an edge in range, or num_keys (the key space's
// size) for a pair that is no key (a self-loop outside "directed"). Python's _encode, per edge.
struct Encoder {
  int64_t num_src, num_dst, num_keys;  // "no_loops" and "undirected": num_src == num_dst

  PYG_EDGEDOT_HD bool in_range(int64_t src, int64_t dst) const {
    return src >= 0 && src < num_src && dst >= 0 && dst < num_dst;
  }

  template <Mode mode>
  PYG_EDGEDOT_HD int64_t key(int64_t src, int64_t dst) const {
    if (mode == Mode::kDirected) return src * num_dst + dst;
    if (src == dst) return num_keys;
    if (mode == Mode::kNoLoops) return src * (num_dst - 1) + dst - (dst > src ? 1 : 0);
    const int64_t row = src < dst ? src : dst, col = src < dst ? dst : src;
    return tri_row_start(row, num_src) + col - row - 1;
  }
};

struct Decoder {
  int64_t num_nodes, width;  // width: keys per source row (directed, no_loops)
  double inverse;            // 1 / width

  template <Mode mode>
  PYG_EDGEDOT_HD void decode(int64_t key, int64_t& src, int64_t& dst) const {
    if (mode == Mode::kUndirected) {
      // The quadratic formula in float64 (correctly rounded sqrt: the same estimate on every
      // device), then exact steps to the right row.
      const double b = 2.0 * static_cast<double>(num_nodes) - 1.0;
      const double d = b * b - 8.0 * static_cast<double>(key);
      const double disc = 0.0 < d ? d : 0.0;
      int64_t row = static_cast<int64_t>(::floor((b - ::sqrt(disc)) / 2.0));
      row = row < 0 ? 0 : (num_nodes - 2 < row ? num_nodes - 2 : row);
      while (row > 0 && tri_row_start(row, num_nodes) > key) --row;
      while (row < num_nodes - 2 && tri_row_start(row + 1, num_nodes) <= key) ++row;
      src = row;
      dst = key - tri_row_start(row, num_nodes) + row + 1;
      return;
    }
    src = divide(key, width, inverse);
    const int64_t col = key - src * width;
    dst = (mode == Mode::kNoLoops && col >= src) ? col + 1 : col;
  }
};

// ---------------------------------------------------------------------------------------
// Host side: argument checks and the sizes of the draw's rounds
// ---------------------------------------------------------------------------------------

inline int bit_width(int64_t values_below) {  // bits of the largest value below values_below
  int bits = 0;
  for (uint64_t v = static_cast<uint64_t>((values_below > 1 ? values_below : 1) - 1); v;
       v >>= 1) {
    ++bits;
  }
  return bits;
}

// n i.i.d. draws from m values hit ~m(1 - e^{-n/m}) distinct ones, so n = -m log(1 - k/m)
// expects k; + 4 sqrt(k) + 8 covers the spread (the same count as the Python path's).
inline int64_t iid_draw_count(int64_t want, int64_t free) {
  const double w = static_cast<double>(want), f = static_cast<double>(free);
  return static_cast<int64_t>(std::ceil(-f * std::log1p(-w / f) + 4.0 * std::sqrt(w) + 8.0));
}

// More draws of the rank stream for a sparse draw whose draws so far hold only `held` distinct
// ranks (a top-up round): a new draw lands outside them with probability (M - held) / M > 3/4.
inline int64_t top_up_draw_count(int64_t count, int64_t held, int64_t num_ranks, int round) {
  PYG_EDGEDOT_CHECK(round <= kMaxTopUpRounds, "negative_sample: ", std::to_string(round),
                    " top-up rounds left ", std::to_string(count - held),
                    " ranks undrawn (a generator failure)");
  const int64_t free = num_ranks - held;
  return static_cast<int64_t>(std::ceil(static_cast<double>(iid_draw_count(count - held, free)) *
                                        static_cast<double>(num_ranks) /
                                        static_cast<double>(free)));
}

// The permutation's buckets for n > kInCacheShuffle keys: 2^log_buckets of ~kBucketTarget.
inline int log_bucket_count(int64_t n) {
  int log_buckets = 0;
  while ((int64_t{1} << log_buckets) * kBucketTarget < n) ++log_buckets;
  return log_buckets;
}

inline Mode parse_mode(c10::string_view mode) {
  if (mode == "directed") return Mode::kDirected;
  if (mode == "no_loops") return Mode::kNoLoops;
  PYG_EDGEDOT_CHECK(mode == "undirected", "negative_sample: mode must be 'directed', 'no_loops' or "
                    "'undirected' (got '", std::string(mode.data(), mode.size()), "')");
  return Mode::kUndirected;
}

// f(std::integral_constant<Mode, mode>()): the instance of a kernel templated on the mode for
// the mode a call names.
template <typename F>
void dispatch_mode(Mode mode, F&& f) {
  if (mode == Mode::kDirected) {
    f(std::integral_constant<Mode, Mode::kDirected>());
  } else if (mode == Mode::kNoLoops) {
    f(std::integral_constant<Mode, Mode::kNoLoops>());
  } else {
    f(std::integral_constant<Mode, Mode::kUndirected>());
  }
}

// The size of mode's key space over n_src x n_dst nodes (n_src, n_dst >= 0), in 128 bits: the
// checks compare it with 2^62 before narrowing it.
inline __int128 key_space_size(Mode mode, int64_t n_src, int64_t n_dst) {
  const __int128 s = n_src, d = n_dst;
  if (mode == Mode::kUndirected) return s * (s > 0 ? s - 1 : 0) / 2;
  if (mode == Mode::kNoLoops) return d > 0 ? s * (d - 1) : 0;
  return s * d;
}

struct Plan {
  Mode mode;
  int64_t columns;  // of the [2, columns] output
  Decoder decoder;
};

// excluded_keys' arguments; returns the bits its sort needs (the values are in [0, key_bound]).
inline int check_excluded_keys(const at::Tensor& keys, int64_t key_bound) {
  const char* op = "excluded_keys";
  PYG_EDGEDOT_CHECK(keys.dim() == 1 && keys.scalar_type() == at::kLong, op,
                    ": keys must be a 1-D int64 tensor (got ", std::to_string(keys.dim()),
                    "-D ", keys.scalar_type(), ")");
  PYG_EDGEDOT_CHECK(key_bound >= 0 && key_bound < (int64_t{1} << 62), op,
                    ": key_bound must be in [0, 2^62) (got ", std::to_string(key_bound), ")");
  return bit_width(key_bound + 1);
}

// excluded_edge_keys' arguments: the encoder of the mode's key space and the bits its sort
// needs (the keys and the no-key mark are in [0, num_keys]).
struct EdgeKeys {
  Mode mode;
  Encoder encoder;
  int bits;
};

inline EdgeKeys check_excluded_edge_keys(const at::Tensor& edge_index,
                                         c10::string_view mode_name, int64_t num_src_nodes,
                                         int64_t num_dst_nodes) {
  const char* op = "excluded_edge_keys";
  PYG_EDGEDOT_CHECK(edge_index.dim() == 2 && edge_index.size(0) == 2 &&
                        (edge_index.scalar_type() == at::kInt ||
                         edge_index.scalar_type() == at::kLong),
                    op, ": edge_index must be a [2, E] int32 or int64 tensor (got ",
                    std::to_string(edge_index.dim()), "-D ", edge_index.scalar_type(), ")");
  PYG_EDGEDOT_CHECK(mode_name == "directed" || mode_name == "no_loops" ||
                        mode_name == "undirected",
                    op, ": mode must be 'directed', 'no_loops' or 'undirected' (got '",
                    std::string(mode_name.data(), mode_name.size()), "')");
  const Mode mode = parse_mode(mode_name);
  PYG_EDGEDOT_CHECK(num_src_nodes >= 0 && num_dst_nodes >= 0 &&
                        (mode == Mode::kDirected || num_src_nodes == num_dst_nodes),
                    op, ": num_src_nodes and num_dst_nodes must be >= 0, and equal unless mode "
                    "is 'directed' (got ", std::to_string(num_src_nodes), ", ",
                    std::to_string(num_dst_nodes), ")");
  const __int128 num_keys = key_space_size(mode, num_src_nodes, num_dst_nodes);
  PYG_EDGEDOT_CHECK(num_keys < (static_cast<__int128>(1) << 62), op, ": ",
                    std::to_string(num_src_nodes), " x ", std::to_string(num_dst_nodes),
                    " nodes give 2^62 keys or more");
  const int64_t keys = static_cast<int64_t>(num_keys);
  return EdgeKeys{mode, Encoder{num_src_nodes, num_dst_nodes, keys}, bit_width(keys + 1)};
}

// excluded_adj of negative_sample and negative_sample_index: 1-D int64.
inline void check_excluded_adj(const char* op, const at::Tensor& excluded_adj) {
  PYG_EDGEDOT_CHECK(excluded_adj.dim() == 1 && excluded_adj.scalar_type() == at::kLong, op,
                    ": excluded_adj must be a 1-D int64 tensor (got ",
                    std::to_string(excluded_adj.dim()), "-D ", excluded_adj.scalar_type(), ")");
}

// The checks of negative_sample's arguments (both kernels raise the same errors).
inline Plan check_negative_sample(const at::Tensor& excluded_adj, int64_t num_ranks,
                                  int64_t count, bool replace, c10::string_view mode_name,
                                  int64_t num_src_nodes, int64_t num_dst_nodes,
                                  at::ScalarType dtype, int64_t first_round) {
  const char* op = "negative_sample";
  const Mode mode = parse_mode(mode_name);
  check_excluded_adj(op, excluded_adj);
  PYG_EDGEDOT_CHECK(dtype == at::kInt || dtype == at::kLong, op,
                    ": dtype must be int32 or int64 (got ", dtype, ")");
  PYG_EDGEDOT_CHECK(num_src_nodes >= 0 && num_dst_nodes >= 0 && num_ranks >= 0 && count >= 0 &&
                        first_round >= -1,
                    op, ": num_src_nodes, num_dst_nodes, num_ranks and count must be >= 0 and "
                    "first_round >= -1 (got ", std::to_string(num_src_nodes), ", ",
                    std::to_string(num_dst_nodes), ", ", std::to_string(num_ranks), ", ",
                    std::to_string(count), ", ", std::to_string(first_round), ")");
  const __int128 num_keys = key_space_size(mode, num_src_nodes, num_dst_nodes);
  PYG_EDGEDOT_CHECK(num_keys < (static_cast<__int128>(1) << 62) &&
                        num_ranks + excluded_adj.numel() == static_cast<int64_t>(num_keys),
                    op, ": num_ranks + len(excluded_adj) must be the number of ",
                    std::string(mode_name.data(), mode_name.size()),
                    " keys of ", std::to_string(num_src_nodes), " x ",
                    std::to_string(num_dst_nodes), " nodes (got ", std::to_string(num_ranks), " + ",
                    std::to_string(excluded_adj.numel()), ")");
  PYG_EDGEDOT_CHECK(count == 0 || (replace ? num_ranks > 0 : count <= num_ranks), op,
                    ": cannot draw ", std::to_string(count),
                    replace ? " keys from " : " distinct keys from ", std::to_string(num_ranks));
  const int64_t width = mode == Mode::kNoLoops ? num_dst_nodes - 1 : num_dst_nodes;
  const int64_t row_width = width > 1 ? width : 1;
  return Plan{mode, mode == Mode::kUndirected ? 2 * count : count,
              Decoder{num_src_nodes, row_width, 1.0 / static_cast<double>(row_width)}};
}

// The checks of negative_sample_index's arguments.
inline void check_negative_sample_index(const at::Tensor& excluded_adj, int64_t num_ranks) {
  check_excluded_adj("negative_sample_index", excluded_adj);
  PYG_EDGEDOT_CHECK(num_ranks >= 0, "negative_sample_index: num_ranks must be >= 0 (got ",
                    std::to_string(num_ranks), ")");
}

}  // namespace negsample
}  // namespace pyg_edgedot
