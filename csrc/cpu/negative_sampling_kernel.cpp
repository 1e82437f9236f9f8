// CPU kernel of negative_sample (schema in csrc/negative_sampling.cpp): exact uniform
// negatives of one graph, in four linear passes instead of binary searches:
//
//   1. ranks: i.i.d. uniform in [0, M) from a counter-based generator (parallel);
//   2. an LSD radix sort of the ranks; replace=False: duplicates dropped, and top-up rounds
//      of more i.i.d. ranks until `count` distinct ranks are held (rare: the first round
//      draws 4 sqrt(count) + 8 more ranks than it expects to need, many standard deviations
//      of the number of duplicates);
//   3. rank r -> key r + #{i : adj_i <= r} by one merge of the sorted ranks with
//      excluded_adj (pyg_edgedot/ops/negative_sampling.py's docstring says why), branch-free
//      (galloping where excluded_adj is much the longer);
//   4. a uniform random permutation of the keys, whose first `count` are decoded into pairs.
// Dense requests (replace=False, count >= M / 4) take the whole complement (O(M) = O(count))
// in place of steps 1-2.
//
// Why the result is exact:
// * replace=False: every round draws i.i.d. uniform ranks and how many it draws depends only
//   on how many distinct ranks are held, so the law of the whole process is invariant under
//   any permutation of [0, M): given its size, the set of distinct ranks held is a uniform
//   subset. A uniform permutation of it, cut to its first `count`, is a uniform count-subset
//   in uniform random order.
// * replace=True: an i.i.d. sequence is exchangeable, so sorting it and then permuting it
//   uniformly gives an i.i.d. sequence again.
// * the permutation (step 4, for more than kInCacheShuffle keys): every key gets an i.i.d.
//   uniform bucket of B, a stable scatter groups the buckets, and each bucket is shuffled by
//   Fisher-Yates in cache. A given arrangement of the n keys comes out with probability
//   sum_c B^-n prod_b 1 / c_b! over the bucket sizes c, the same for every arrangement.
//
// The generator is splitmix64 by counter, as edge_dot_loss's: output c of stream s is
//   mix64(key_s + (c + 1) * 0x9E3779B97F4A7C15),  key_s = mix64(mix64(seed) + s * kStreamStep)
// with stream 0 the ranks (counters 0, 1, ... across rounds), 1 the bucket of key i, 2 the
// Fisher-Yates step at position i. An integer below m is Lemire's multiply-shift with its
// rejection (exact; a rejected draw, probability < m / 2^64, retries from stream keys derived
// from key_s). Every random number belongs to a position, never to a thread, so the output is
// a function of the arguments only, whatever the number of threads.
//
// Traffic, for n ranks: the draw writes n int64; the sort reads and writes them twice per
// 12-bit digit (3 digits at M ~ 1e10); the merge reads them and excluded_adj once; the
// permutation reads and writes them twice; the pairs are written once.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <utility>
#include <vector>

#include "prefetch.h"

namespace pyg_edgedot {
namespace {

constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ULL;       // splitmix64's increment
constexpr uint64_t kStreamStep = 0xD1B54A32D192ED03ULL;  // odd: distinct stream keys
constexpr uint64_t kRankStream = 0, kBucketStream = 1, kShuffleStream = 2;
constexpr int64_t kGrain = 1 << 14;                      // elements per parallel task, at least
constexpr int64_t kInCacheShuffle = 1 << 16;             // keys Fisher-Yates shuffles directly
constexpr int64_t kBucketTarget = 1 << 12;               // keys per bucket of the permutation

PYG_EDGEDOT_INLINE uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

struct Stream {
  uint64_t key;

  Stream(int64_t seed, uint64_t stream)
      : key(mix64(mix64(static_cast<uint64_t>(seed)) + stream * kStreamStep)) {}

  PYG_EDGEDOT_INLINE uint64_t bits(uint64_t counter) const {
    return mix64(key + (counter + 1) * kGamma);
  }

  // Uniform in [0, m), m >= 1: the high word of bits * m, rejecting the low words below
  // 2^64 mod m (Lemire, "Fast random integer generation in an interval", 2019).
  PYG_EDGEDOT_INLINE uint64_t below(uint64_t counter, uint64_t m) const {
    unsigned __int128 product = static_cast<unsigned __int128>(bits(counter)) * m;
    uint64_t low = static_cast<uint64_t>(product);
    if (low < m) {
      const uint64_t threshold = (0 - m) % m;
      for (uint64_t attempt = 1; low < threshold; ++attempt) {
        const uint64_t retry_key = mix64(key ^ (attempt * kStreamStep));
        product = static_cast<unsigned __int128>(mix64(retry_key + (counter + 1) * kGamma)) * m;
        low = static_cast<uint64_t>(product);
      }
    }
    return static_cast<uint64_t>(product >> 64);
  }
};

// An uninitialized int64 buffer (a std::vector would zero it: one more pass over memory).
struct Buffer {
  std::unique_ptr<int64_t[]> data;
  explicit Buffer(int64_t n) : data(new int64_t[std::max<int64_t>(n, 1)]) {}
  int64_t* get() const { return data.get(); }
};

int bit_width(int64_t values_below) {  // bits of the largest value below values_below
  int bits = 0;
  for (uint64_t v = static_cast<uint64_t>(std::max<int64_t>(values_below, 1) - 1); v; v >>= 1) {
    ++bits;
  }
  return bits;
}

// out[i] = a uniform rank in [0, m) from counter first_counter + i of the rank stream.
void draw_ranks(int64_t* out, int64_t n, const Stream& ranks, int64_t first_counter, int64_t m) {
  at::parallel_for(0, n, kGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      out[i] = static_cast<int64_t>(ranks.below(first_counter + i, m));
    }
  });
}

// Sorts data[0, n), values in [0, 2^bits), ascending: LSD radix sort, digits of at most 12
// bits (a 4096-entry histogram per part), the parts of each pass in parallel. Returns the
// buffer holding the result, data or scratch (n entries).
int64_t* radix_sort(int64_t* data, int64_t* scratch, int64_t n, int bits) {
  if (n < 2 || bits == 0) return data;
  if (n <= 64) {
    std::sort(data, data + n);
    return data;
  }
  constexpr int kMaxDigit = 12;
  const int passes = (bits + kMaxDigit - 1) / kMaxDigit;
  const int width = (bits + passes - 1) / passes;
  const int64_t buckets = int64_t{1} << width;
  const uint64_t mask = static_cast<uint64_t>(buckets - 1);
  const int64_t parts = std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(),
                                                               n / (4 * kGrain)));
  const int64_t part_size = (n + parts - 1) / parts;
  std::vector<int64_t> offset(parts * buckets);
  int64_t* src = data;
  int64_t* dst = scratch;
  for (int pass = 0; pass < passes; ++pass) {
    const int shift = pass * width;
    std::fill(offset.begin(), offset.end(), 0);
    at::parallel_for(0, parts, 1, [&](int64_t first, int64_t last) {
      for (int64_t part = first; part < last; ++part) {
        int64_t* count = offset.data() + part * buckets;
        const int64_t end = std::min(n, (part + 1) * part_size);
        for (int64_t i = part * part_size; i < end; ++i) {
          ++count[(static_cast<uint64_t>(src[i]) >> shift) & mask];
        }
      }
    });
    // Bucket-major, part-minor: a stable scatter. A digit shared by every value moves
    // nothing: skip its pass.
    int64_t total = 0;
    bool one_bucket = false;
    for (int64_t b = 0; b < buckets; ++b) {
      int64_t in_bucket = 0;
      for (int64_t part = 0; part < parts; ++part) {
        const int64_t c = offset[part * buckets + b];
        offset[part * buckets + b] = total + in_bucket;
        in_bucket += c;
      }
      one_bucket |= in_bucket == n;
      total += in_bucket;
    }
    if (one_bucket) continue;
    at::parallel_for(0, parts, 1, [&](int64_t first, int64_t last) {
      for (int64_t part = first; part < last; ++part) {
        int64_t* next = offset.data() + part * buckets;
        const int64_t end = std::min(n, (part + 1) * part_size);
        for (int64_t i = part * part_size; i < end; ++i) {
          const int64_t v = src[i];
          dst[next[(static_cast<uint64_t>(v) >> shift) & mask]++] = v;
        }
      }
    });
    std::swap(src, dst);
  }
  return src;
}

// The first index at or after p whose adj exceeds r, given adj[p - 1] <= r (adj
// non-decreasing): galloping, so a merge of n sorted ranks with A entries costs
// O(n log(A / n + 2)), linear when n ~ A and a binary search per rank when n << A.
PYG_EDGEDOT_INLINE int64_t skip_not_above(const int64_t* adj, int64_t num_adj, int64_t p,
                                          int64_t r) {
  if (p >= num_adj || adj[p] > r) return p;
  int64_t lo = p + 1, hi = num_adj;  // adj[lo - 1] <= r; adj[hi] > r or hi = num_adj
  for (int64_t step = 1;; step <<= 1) {
    const int64_t probe = lo + step - 1;
    if (probe >= num_adj) break;
    if (adj[probe] > r) {
      hi = probe;
      break;
    }
    lo = probe + 1;
  }
  return std::upper_bound(adj + lo, adj + hi, r) - adj;
}

// One merge of sorted ranks with adj: keys[i] = ranks[i] + j, j = #{adj <= ranks[i]}. Each
// step moves one of the two cursors, with no branch to mispredict; j stops at j_end, the
// count for the last rank of the range.
struct Merge {
  int64_t i, end, j, j_end;
  bool active() const { return i < end && j < j_end; }
};

PYG_EDGEDOT_INLINE void merge_step(Merge& m, const int64_t* ranks, int64_t* keys,
                                   const int64_t* adj) {
  const int64_t r = ranks[m.i];
  const bool past = adj[m.j] <= r;
  keys[m.i] = r + m.j;  // final once the step does not move j
  m.j += past;
  m.i += !past;
}

// keys[i] = r + #{j : adj[j] <= r} for r = ranks[i], ranks sorted ascending. Where adj is
// at most ~16x longer than the ranks: branch-free merges, four interleaved per parallel part
// (each step waits on the last one's loads: four hide that latency); else galloping.
void ranks_to_keys(const int64_t* ranks, int64_t* keys, int64_t n, const int64_t* adj,
                   int64_t num_adj) {
  at::parallel_for(0, n, kGrain, [&](int64_t begin, int64_t end) {
    const auto count_not_above = [&](int64_t r) {
      return std::upper_bound(adj, adj + num_adj, r) - adj;
    };
    const int64_t first = count_not_above(ranks[begin]);
    const int64_t last = count_not_above(ranks[end - 1]);
    if (last - first > 16 * (end - begin)) {
      int64_t p = first;
      for (int64_t i = begin; i < end; ++i) {
        p = skip_not_above(adj, num_adj, p, ranks[i]);
        keys[i] = ranks[i] + p;
      }
      return;
    }
    constexpr int kWays = 4;
    Merge m[kWays];
    for (int w = 0; w < kWays; ++w) {
      const int64_t lo = begin + (end - begin) * w / kWays;
      const int64_t hi = begin + (end - begin) * (w + 1) / kWays;
      m[w] = Merge{lo, hi, lo < hi ? count_not_above(ranks[lo]) : 0,
                   lo < hi ? count_not_above(ranks[hi - 1]) : 0};
    }
    while (m[0].active() && m[1].active() && m[2].active() && m[3].active()) {
      for (int w = 0; w < kWays; ++w) merge_step(m[w], ranks, keys, adj);
    }
    for (int w = 0; w < kWays; ++w) {
      while (m[w].active()) merge_step(m[w], ranks, keys, adj);
      for (int64_t i = m[w].i; i < m[w].end; ++i) keys[i] = ranks[i] + m[w].j;
    }
  });
}

// Forward Fisher-Yates over data[0, n): its first `keep` entries become a uniform ordered
// keep-subset; step i draws at counter first_counter + i of the shuffle stream.
void fisher_yates(int64_t* data, int64_t n, int64_t keep, const Stream& shuffle,
                  int64_t first_counter) {
  for (int64_t i = 0; i < std::min(keep, n - 1); ++i) {
    const int64_t j = i + static_cast<int64_t>(shuffle.below(first_counter + i, n - i));
    std::swap(data[i], data[j]);
  }
}

// A uniform random permutation of data[0, n), of which only the first `keep` entries are
// needed (the buckets past them are left unshuffled). Returns the buffer holding it, data or
// scratch (n entries). Large inputs: random buckets, a stable scatter (parts in parallel),
// then each bucket in cache (see the top of the file).
int64_t* shuffle(int64_t* data, int64_t* scratch, int64_t n, int64_t keep, int64_t seed) {
  const Stream fy(seed, kShuffleStream);
  if (n <= kInCacheShuffle) {
    fisher_yates(data, n, keep, fy, 0);
    return data;
  }
  int log_buckets = 0;
  while ((int64_t{1} << log_buckets) * kBucketTarget < n) ++log_buckets;
  const int64_t buckets = int64_t{1} << log_buckets;
  const Stream label(seed, kBucketStream);
  const int drop = 64 - log_buckets;
  const int64_t parts = std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(),
                                                               n / (4 * kGrain)));
  const int64_t part_size = (n + parts - 1) / parts;
  std::vector<int64_t> offset(parts * buckets, 0);
  at::parallel_for(0, parts, 1, [&](int64_t first, int64_t last) {
    for (int64_t part = first; part < last; ++part) {
      int64_t* count = offset.data() + part * buckets;
      const int64_t end = std::min(n, (part + 1) * part_size);
      for (int64_t i = part * part_size; i < end; ++i) ++count[label.bits(i) >> drop];
    }
  });
  std::vector<int64_t> bucket_start(buckets + 1);
  int64_t total = 0;
  for (int64_t b = 0; b < buckets; ++b) {
    bucket_start[b] = total;
    for (int64_t part = 0; part < parts; ++part) {
      const int64_t c = offset[part * buckets + b];
      offset[part * buckets + b] = total;
      total += c;
    }
  }
  bucket_start[buckets] = total;
  at::parallel_for(0, parts, 1, [&](int64_t first, int64_t last) {
    for (int64_t part = first; part < last; ++part) {
      int64_t* next = offset.data() + part * buckets;
      const int64_t end = std::min(n, (part + 1) * part_size);
      for (int64_t i = part * part_size; i < end; ++i) {
        scratch[next[label.bits(i) >> drop]++] = data[i];
      }
    }
  });
  int64_t used = 0;  // buckets holding any of the first `keep` entries
  while (used < buckets && bucket_start[used] < keep) ++used;
  at::parallel_for(0, used, 1, [&](int64_t first, int64_t last) {
    for (int64_t b = first; b < last; ++b) {
      const int64_t start = bucket_start[b], size = bucket_start[b + 1] - start;
      fisher_yates(scratch + start, size, size, fy, start);
    }
  });
  return scratch;
}

// ---------------------------------------------------------------------------------------
// Keys -> pairs (the three key spaces of pyg_edgedot/ops/negative_sampling.py)
// ---------------------------------------------------------------------------------------

enum class Mode { kDirected, kNoLoops, kUndirected };

// floor(a / b) for 0 <= a < 2^62, b >= 1: a float64 estimate, exact division only where the
// estimate is off (64-bit division is ~10x slower).
PYG_EDGEDOT_INLINE int64_t divide(int64_t a, int64_t b, double inverse) {
  const int64_t q = static_cast<int64_t>(static_cast<double>(a) * inverse);
  const int64_t rest = a - q * b;
  return (rest >= 0 && rest < b) ? q : a / b;
}

// First key of row i of the strict upper triangle of n nodes: i * (2n - i - 1) / 2, without
// overflow (one factor is even).
PYG_EDGEDOT_INLINE int64_t tri_row_start(int64_t row, int64_t n) {
  const int64_t other = 2 * n - row - 1;
  return row % 2 == 0 ? (row / 2) * other : row * (other / 2);
}

struct Decoder {
  int64_t num_nodes, width;  // width: keys per source row (directed, no_loops)
  double inverse;            // 1 / width

  template <Mode mode>
  PYG_EDGEDOT_INLINE void decode(int64_t key, int64_t& src, int64_t& dst) const {
    if (mode == Mode::kUndirected) {
      // The quadratic formula in float64, then exact steps to the right row.
      const double b = 2.0 * static_cast<double>(num_nodes) - 1.0;
      const double disc = std::max(0.0, b * b - 8.0 * static_cast<double>(key));
      int64_t row = static_cast<int64_t>(std::floor((b - std::sqrt(disc)) / 2.0));
      row = std::clamp<int64_t>(row, 0, num_nodes - 2);
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

// out [2, columns]: pair t of keys[0, count) in column t; undirected: its mirror in column
// count + t.
template <Mode mode, typename index_t>
void write_pairs(const int64_t* keys, int64_t count, const Decoder decoder, index_t* out,
                 int64_t columns) {
  at::parallel_for(0, count, kGrain, [=](int64_t begin, int64_t end) {
    index_t* __restrict__ src_out = out;
    index_t* __restrict__ dst_out = out + columns;
    for (int64_t t = begin; t < end; ++t) {
      int64_t src, dst;
      decoder.decode<mode>(keys[t], src, dst);
      src_out[t] = static_cast<index_t>(src);
      dst_out[t] = static_cast<index_t>(dst);
      if (mode == Mode::kUndirected) {
        src_out[count + t] = static_cast<index_t>(dst);
        dst_out[count + t] = static_cast<index_t>(src);
      }
    }
  });
}

// n i.i.d. draws from m values hit ~m(1 - e^{-n/m}) distinct ones, so n = -m log(1 - k/m)
// expects k; + 4 sqrt(k) + 8 covers the spread (the same count as the Python path's).
int64_t iid_draw_count(int64_t want, int64_t free) {
  const double w = static_cast<double>(want), f = static_cast<double>(free);
  return static_cast<int64_t>(std::ceil(-f * std::log1p(-w / f) + 4.0 * std::sqrt(w) + 8.0));
}

// Sorted distinct ranks, at least `count` of them (count < M / 4): i.i.d. rounds (see the top
// of the file). Returns the buffer holding them, their number and a scratch of that size.
struct Held {
  Buffer ranks, scratch;
  int64_t* sorted;
  int64_t size;
};

Held draw_distinct(int64_t num_ranks, int64_t count, int64_t seed, int64_t first_round) {
  const Stream rank_stream(seed, kRankStream);
  const int bits = bit_width(num_ranks);
  int64_t draws = first_round >= 0 ? first_round : iid_draw_count(count, num_ranks);
  Held held{Buffer(draws), Buffer(draws), nullptr, 0};
  draw_ranks(held.ranks.get(), draws, rank_stream, 0, num_ranks);
  held.sorted = radix_sort(held.ranks.get(), held.scratch.get(), draws, bits);
  held.size = std::unique(held.sorted, held.sorted + draws) - held.sorted;
  int64_t used = draws;  // rank-stream counters used so far
  while (held.size < count) {
    // More i.i.d. ranks of [0, M): a draw lands outside the held ones with probability
    // (M - held) / M > 3/4.
    const int64_t free = num_ranks - held.size;
    draws = static_cast<int64_t>(std::ceil(
        static_cast<double>(iid_draw_count(count - held.size, free)) *
        static_cast<double>(num_ranks) / static_cast<double>(free)));
    Buffer more(draws), more_scratch(draws);
    draw_ranks(more.get(), draws, rank_stream, used, num_ranks);
    used += draws;
    int64_t* sorted = radix_sort(more.get(), more_scratch.get(), draws, bits);
    const int64_t distinct = std::unique(sorted, sorted + draws) - sorted;
    Buffer merged(held.size + distinct);
    const int64_t size = std::set_union(held.sorted, held.sorted + held.size, sorted,
                                        sorted + distinct, merged.get()) - merged.get();
    held = Held{std::move(merged), Buffer(size), nullptr, size};
    held.sorted = held.ranks.get();
  }
  return held;
}

Mode parse_mode(c10::string_view mode) {
  if (mode == "directed") return Mode::kDirected;
  if (mode == "no_loops") return Mode::kNoLoops;
  TORCH_CHECK(mode == "undirected", "negative_sample: mode must be 'directed', 'no_loops' or "
              "'undirected' (got '", std::string(mode.data(), mode.size()), "')");
  return Mode::kUndirected;
}

at::Tensor negative_sample_cpu(const at::Tensor& excluded_adj, int64_t num_ranks, int64_t count,
                               int64_t seed, bool replace, c10::string_view mode_name,
                               int64_t num_src_nodes, int64_t num_dst_nodes,
                               at::ScalarType dtype, int64_t first_round) {
  const char* op = "negative_sample";
  const Mode mode = parse_mode(mode_name);
  TORCH_CHECK(excluded_adj.dim() == 1 && excluded_adj.scalar_type() == at::kLong, op,
              ": excluded_adj must be a 1-D int64 tensor (got ", excluded_adj.dim(), "-D ",
              excluded_adj.scalar_type(), ")");
  TORCH_CHECK(dtype == at::kInt || dtype == at::kLong, op, ": dtype must be int32 or int64 (got ",
              dtype, ")");
  TORCH_CHECK(num_src_nodes >= 0 && num_dst_nodes >= 0 && num_ranks >= 0 && count >= 0 &&
                  first_round >= -1,
              op, ": num_src_nodes, num_dst_nodes, num_ranks and count must be >= 0 and "
              "first_round >= -1 (got ", num_src_nodes, ", ", num_dst_nodes, ", ", num_ranks,
              ", ", count, ", ", first_round, ")");
  const __int128 width = mode == Mode::kNoLoops ? num_dst_nodes - 1 : num_dst_nodes;
  const __int128 num_keys = mode == Mode::kUndirected
                                ? static_cast<__int128>(num_src_nodes) * (num_src_nodes - 1) / 2
                                : static_cast<__int128>(num_src_nodes) * std::max<__int128>(width, 0);
  TORCH_CHECK(num_keys < (static_cast<__int128>(1) << 62) &&
                  num_ranks + excluded_adj.numel() == static_cast<int64_t>(num_keys),
              op, ": num_ranks + len(excluded_adj) must be the number of ",
              std::string(mode_name.data(), mode_name.size()),
              " keys of ", num_src_nodes, " x ", num_dst_nodes, " nodes (got ", num_ranks, " + ",
              excluded_adj.numel(), ")");
  TORCH_CHECK(count == 0 || (replace ? num_ranks > 0 : count <= num_ranks), op,
              ": cannot draw ", count, replace ? " keys from " : " distinct keys from ",
              num_ranks);
  const int64_t columns = mode == Mode::kUndirected ? 2 * count : count;
  at::Tensor out = at::empty({2, columns}, excluded_adj.options().dtype(dtype));
  if (count == 0) return out;

  const at::Tensor adj = excluded_adj.contiguous();
  const int64_t* adj_data = adj.const_data_ptr<int64_t>();
  const int64_t num_adj = adj.numel();
  Held held{Buffer(0), Buffer(0), nullptr, 0};
  if (replace) {
    held = Held{Buffer(count), Buffer(count), nullptr, count};
    draw_ranks(held.ranks.get(), count, Stream(seed, kRankStream), 0, num_ranks);
    held.sorted = radix_sort(held.ranks.get(), held.scratch.get(), count, bit_width(num_ranks));
  } else if (count >= (num_ranks + 3) / 4) {  // count >= M / 4: the whole complement
    held = Held{Buffer(num_ranks), Buffer(num_ranks), nullptr, num_ranks};
    held.sorted = held.ranks.get();
    at::parallel_for(0, num_ranks, kGrain, [&](int64_t begin, int64_t end) {
      std::iota(held.sorted + begin, held.sorted + end, begin);
    });
  } else {
    held = draw_distinct(num_ranks, count, seed, first_round);
  }
  int64_t* keys = held.sorted;
  int64_t* scratch = held.sorted == held.ranks.get() ? held.scratch.get() : held.ranks.get();
  if (num_adj > 0) {
    ranks_to_keys(held.sorted, scratch, held.size, adj_data, num_adj);
    std::swap(keys, scratch);
  }
  keys = shuffle(keys, scratch, held.size, count, seed);

  const int64_t row_width = static_cast<int64_t>(std::max<__int128>(width, 1));
  const Decoder decoder{num_src_nodes, row_width, 1.0 / static_cast<double>(row_width)};
  AT_DISPATCH_INDEX_TYPES(dtype, "negative_sample", [&] {
    index_t* pairs = out.data_ptr<index_t>();
    if (mode == Mode::kDirected) {
      write_pairs<Mode::kDirected>(keys, count, decoder, pairs, columns);
    } else if (mode == Mode::kNoLoops) {
      write_pairs<Mode::kNoLoops>(keys, count, decoder, pairs, columns);
    } else {
      write_pairs<Mode::kUndirected>(keys, count, decoder, pairs, columns);
    }
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(pyg_edgedot, CPU, m) {
  m.impl("negative_sample", &negative_sample_cpu);
}

}  // namespace pyg_edgedot
