// CPU kernel of negative_sample (schema in csrc/negative_sampling.cpp): exact uniform
// negatives of one graph, by linear passes instead of binary searches. The generator, the
// per-element math and the checks are csrc/negative_sampling_common.h's, shared with the CUDA
// kernel, which computes the same draws by another route (its header says how). Rank i of the
// rank stream is the i-th i.i.d. uniform rank in [0, M) (M: the complement's size):
//
//   replace=True: the keys of ranks 0 .. count - 1, in draw order;
//   replace=False, count < M / 4 (sparse): the keys of the first `count` distinct ranks of
//     the stream, in order of first appearance;
//   replace=False, count >= M / 4 (dense): the first `count` keys of a uniform random
//     permutation of the whole complement (O(M) = O(count)).
//
// The sparse and i.i.d. draws: n ranks (counters 0 .. n - 1; sparse: n = count plus a margin,
// iid_draw_count) are sorted by (rank, draw index) with an LSD radix sort on the rank bits
// (rank << index_bits | index in one word where it fits, else the index as a payload); rank
// r -> key r + #{i : adj_i <= r} by one merge of the sorted ranks with excluded_adj
// (pyg_edgedot/ops/negative_sampling.py's docstring says why), branch-free (galloping where
// excluded_adj is much the longer); then each key goes to its draw index. Sparse: the first of
// each run of equal ranks is its first appearance, the others (repeats) are dropped by one pass
// in draw order, which keeps the first `count`. Fewer than `count` distinct ranks (rare: the
// margin is 4 sqrt(count) + 8 draws, many standard deviations of the number of repeats): the
// draw runs again with more draws of the same stream (top_up_draw_count), which gives the same
// first appearances, so the result is the first `count` distinct ranks of one stream whatever
// the number of rounds.
//
// Why the result is exact:
// * sparse: in an i.i.d. uniform sequence, each new value (first appearance) is uniform over
//   the values not seen yet, so the first `count` distinct values, in order of first
//   appearance, are a uniform count-subset in uniform random order.
// * replace=True: i.i.d. by definition.
// * dense (the permutation, for more than kInCacheShuffle keys): every key gets an i.i.d.
//   uniform bucket of B, a stable scatter groups the buckets, and each bucket is shuffled by
//   Fisher-Yates in cache. A given arrangement of the n keys comes out with probability
//   sum_c B^-n prod_b 1 / c_b! over the bucket sizes c, the same for every arrangement.
//
// The generator (negative_sampling_common.h) is splitmix64 by counter, as edge_dot_loss's:
// output c of stream s is
//   mix64(key_s + (c + 1) * 0x9E3779B97F4A7C15),  key_s = mix64(mix64(seed) + s * kStreamStep)
// with stream 0 the ranks, 1 the bucket of key i, 2 the Fisher-Yates step at position i. An
// integer below m is Lemire's multiply-shift with its rejection (exact; a rejected draw,
// probability < m / 2^64, retries from stream keys derived from key_s). Every random number
// belongs to a position, never to a thread, so the output is a function of the arguments
// only, whatever the number of threads.
//
// Traffic, for n draws: the draw writes n int64; the sort reads and writes them twice per
// 12-bit digit of the rank (3 digits at M ~ 1e10); the merge reads them and excluded_adj once
// and writes the keys; the keys go to their draw index (random writes), a pass in draw order
// compacts them (sparse), and the pairs are written once.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "adj_index.h"
#include "first_bad.h"
#include "negative_sampling_common.h"
#include "prefetch.h"

namespace pyg_edgedot {
namespace {

using namespace negsample;

constexpr int64_t kGrain = 1 << 14;                      // elements per parallel task, at least

// An uninitialized int64 buffer (a std::vector would zero it: one more pass over memory).
struct Buffer {
  std::unique_ptr<int64_t[]> data;
  explicit Buffer(int64_t n) : data(new int64_t[std::max<int64_t>(n, 1)]) {}
  int64_t* get() const { return data.get(); }
};

struct NoPayload {};

// Sorts keys[0, n) (non-negative) stably by their bits [low, low + bits) (those above zero,
// those below ignored), moving payload[0, n) along (P = NoPayload: none): LSD radix sort,
// digits of at most 12 bits (a 4096-entry histogram per part), the parts of each pass in
// parallel. On return `keys` and `payload` point at the result (each swapped with its scratch
// where the result ended there).
template <typename P>
void radix_sort(int64_t*& keys, int64_t*& key_scratch, P*& payload, P*& payload_scratch,
                int64_t n, int bits, int low = 0) {
  constexpr bool kPayload = !std::is_same<P, NoPayload>::value;
  if (n < 2 || bits == 0) return;
  if (n <= 64) {  // insertion sort, stable
    const auto digits = [&](int64_t v) { return static_cast<uint64_t>(v) >> low; };
    for (int64_t i = 1; i < n; ++i) {
      const int64_t v = keys[i];
      int64_t j = i;
      if constexpr (kPayload) {
        const P p = payload[i];
        for (; j > 0 && digits(keys[j - 1]) > digits(v); --j) {
          keys[j] = keys[j - 1];
          payload[j] = payload[j - 1];
        }
        payload[j] = p;
      } else {
        for (; j > 0 && digits(keys[j - 1]) > digits(v); --j) keys[j] = keys[j - 1];
      }
      keys[j] = v;
    }
    return;
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
  for (int pass = 0; pass < passes; ++pass) {
    const int shift = low + pass * width;
    const int64_t* src = keys;
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
    int64_t* dst = key_scratch;
    const P* payload_src = payload;
    P* payload_dst = payload_scratch;
    at::parallel_for(0, parts, 1, [&](int64_t first, int64_t last) {
      for (int64_t part = first; part < last; ++part) {
        int64_t* next = offset.data() + part * buckets;
        const int64_t end = std::min(n, (part + 1) * part_size);
        for (int64_t i = part * part_size; i < end; ++i) {
          const int64_t v = src[i];
          const int64_t at = next[(static_cast<uint64_t>(v) >> shift) & mask]++;
          dst[at] = v;
          if constexpr (kPayload) payload_dst[at] = payload_src[i];
        }
      }
    });
    std::swap(keys, key_scratch);
    if constexpr (kPayload) std::swap(payload, payload_scratch);
  }
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
  return upper_bound(adj, lo, hi, r);
}

// One merge of sorted ranks with adj: keys[i] = ranks[i] + j, j = #{adj <= ranks[i]}, where
// the rank is word[i] >> shift. Each step moves one of the two cursors, with no branch to
// mispredict; j stops at j_end, the count for the last rank of the range.
struct Merge {
  int64_t i, end, j, j_end;
  bool active() const { return i < end && j < j_end; }
};

PYG_EDGEDOT_INLINE void merge_step(Merge& m, const int64_t* words, int shift, int64_t* keys,
                                   const int64_t* adj) {
  const int64_t r = words[m.i] >> shift;
  const bool past = adj[m.j] <= r;
  keys[m.i] = r + m.j;  // final once the step does not move j
  m.j += past;
  m.i += !past;
}

// keys[i] = r + #{j : adj[j] <= r} for r = words[i] >> shift, ascending in i. Where adj is
// at most ~16x longer than the ranks: branch-free merges, four interleaved per parallel part
// (each step waits on the last one's loads: four hide that latency); else galloping.
void ranks_to_keys(const int64_t* words, int shift, int64_t* keys, int64_t n,
                   const int64_t* adj, int64_t num_adj) {
  at::parallel_for(0, n, kGrain, [&](int64_t begin, int64_t end) {
    const auto rank = [&](int64_t i) { return words[i] >> shift; };
    if (num_adj == 0) {
      for (int64_t i = begin; i < end; ++i) keys[i] = rank(i);
      return;
    }
    const auto count_not_above = [&](int64_t r) {
      return upper_bound(adj, 0, num_adj, r);
    };
    const int64_t first = count_not_above(rank(begin));
    const int64_t last = count_not_above(rank(end - 1));
    if (last - first > 16 * (end - begin)) {
      int64_t p = first;
      for (int64_t i = begin; i < end; ++i) {
        p = skip_not_above(adj, num_adj, p, rank(i));
        keys[i] = rank(i) + p;
      }
      return;
    }
    constexpr int kWays = 4;
    Merge m[kWays];
    for (int w = 0; w < kWays; ++w) {
      const int64_t lo = begin + (end - begin) * w / kWays;
      const int64_t hi = begin + (end - begin) * (w + 1) / kWays;
      m[w] = Merge{lo, hi, lo < hi ? count_not_above(rank(lo)) : 0,
                   lo < hi ? count_not_above(rank(hi - 1)) : 0};
    }
    while (m[0].active() && m[1].active() && m[2].active() && m[3].active()) {
      for (int w = 0; w < kWays; ++w) merge_step(m[w], words, shift, keys, adj);
    }
    for (int w = 0; w < kWays; ++w) {
      while (m[w].active()) merge_step(m[w], words, shift, keys, adj);
      for (int64_t i = m[w].i; i < m[w].end; ++i) keys[i] = rank(i) + m[w].j;
    }
  });
}

// Forward Fisher-Yates over data[0, n): its first `keep` entries become a uniform ordered
// keep-subset; step i draws at counter first_counter + i of the shuffle stream.
void fisher_yates(int64_t* data, int64_t n, int64_t keep, const Stream& shuffle,
                  int64_t first_counter) {
  for (int64_t i = 0; i < std::min(keep, n - 1); ++i) {
    const int64_t j = fisher_yates_target(shuffle, first_counter + i, first_counter + n) -
                      first_counter;
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
  const int log_buckets = log_bucket_count(n);
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
      for (int64_t i = part * part_size; i < end; ++i) ++count[bucket_of(label, i, drop)];
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
        scratch[next[bucket_of(label, i, drop)]++] = data[i];
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

// A buffer of n values of T, uninitialized.
template <typename T>
std::unique_ptr<T[]> uninitialized(int64_t n) {
  return std::unique_ptr<T[]>(new T[std::max<int64_t>(n, 1)]);
}

// Draws 0, 1, ..., n - 1 of the rank stream sorted by (rank, draw index), and their keys.
// Where rank and index fit one int64 (rank << index_bits | index), the sort moves those words
// on the rank bits alone (8 bytes a draw; the stable sort keeps the indices of equal ranks
// ascending); else it moves the indices as a payload.
template <typename pos_t>
struct SortedDraws {
  Buffer word_buffer, scratch_buffer;
  std::unique_ptr<pos_t[]> index_buffer, index_scratch;
  int64_t* words;  // sorted by rank = word >> shift (equal ranks in draw order)
  pos_t* index;    // without packing: the draw index of each word
  int64_t* keys;   // the key of each rank
  int64_t n, mask;
  int shift;

  SortedDraws(int64_t n, int64_t seed, int64_t num_ranks, const int64_t* adj, int64_t num_adj)
      : word_buffer(n), scratch_buffer(n), n(n) {
    PYG_EDGEDOT_CHECK(n - 1 <= static_cast<int64_t>(std::numeric_limits<pos_t>::max()),
                      "negative_sample: ", std::to_string(n), " draws overflow their index");
    const Stream stream(seed, kRankStream);
    const int rank_bits = bit_width(num_ranks), index_bits = bit_width(n);
    const bool packed = rank_bits + index_bits <= 63;
    shift = packed ? index_bits : 0;
    mask = (int64_t{1} << shift) - 1;
    words = word_buffer.get();
    int64_t* scratch = scratch_buffer.get();
    index = nullptr;
    if (!packed) {
      index_buffer = uninitialized<pos_t>(n);
      index_scratch = uninitialized<pos_t>(n);
      index = index_buffer.get();
    }
    at::parallel_for(0, n, kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const int64_t r = static_cast<int64_t>(stream.below(static_cast<uint64_t>(i),
                                                             static_cast<uint64_t>(num_ranks)));
        if (packed) {
          words[i] = (r << shift) | i;
        } else {
          words[i] = r;
          index[i] = static_cast<pos_t>(i);
        }
      }
    });
    if (packed) {
      NoPayload *no_payload = nullptr, *no_scratch = nullptr;
      radix_sort(words, scratch, no_payload, no_scratch, n, rank_bits, shift);
    } else {
      pos_t* payload_scratch = index_scratch.get();
      radix_sort(words, scratch, index, payload_scratch, n, rank_bits);
    }
    keys = scratch;
    ranks_to_keys(words, shift, keys, n, adj, num_adj);
  }

  PYG_EDGEDOT_INLINE int64_t draw(int64_t q) const {
    return index != nullptr ? static_cast<int64_t>(index[q]) : words[q] & mask;
  }
};

// replace=True: out[i] = the key of draw i of the rank stream, i < count (draw order).
template <typename pos_t>
void iid_keys(int64_t num_ranks, int64_t count, int64_t seed, const int64_t* adj,
              int64_t num_adj, int64_t* out) {
  const SortedDraws<pos_t> d(count, seed, num_ranks, adj, num_adj);
  at::parallel_for(0, count, kGrain, [&](int64_t begin, int64_t end) {
    for (int64_t q = begin; q < end; ++q) out[d.draw(q)] = d.keys[q];
  });
}

// replace=False, count < M / 4: keys[t] = the key of the t-th distinct rank of the rank
// stream in order of first appearance, t < count (see the top of the file); returns the buffer
// holding keys[0, count). A round draws n ranks (counters 0 .. n - 1) and sorts them by (rank,
// draw index): the first of each run of equal ranks is its first appearance, the others are
// repeats. Keys go to their draw index (repeats marked -1), then one pass in draw order keeps
// the first `count` others. Fewer than `count` distinct ranks (rare): a longer stream, drawn
// again from counter 0.
template <typename pos_t>
Buffer first_distinct_keys(int64_t num_ranks, int64_t count, int64_t seed, int64_t first_round,
                           const int64_t* adj, int64_t num_adj) {
  int64_t n = first_round >= 0 ? first_round : iid_draw_count(count, num_ranks);
  for (int round = 1;; ++round) {
    const SortedDraws<pos_t> d(n, seed, num_ranks, adj, num_adj);
    Buffer by_draw(n);
    int64_t* out = by_draw.get();
    const int64_t* keys = d.keys;  // strictly increasing in the rank: repeats are equal keys
    const int64_t repeats = at::parallel_reduce(
        0, n, kGrain, int64_t{0},
        [&](int64_t begin, int64_t end, int64_t found) {
          for (int64_t q = begin; q < end; ++q) {
            const bool repeat = q > 0 && keys[q] == keys[q - 1];
            out[d.draw(q)] = repeat ? -1 : keys[q];
            found += repeat;
          }
          return found;
        },
        std::plus<int64_t>());
    if (n - repeats < count) {
      n += top_up_draw_count(count, n - repeats, num_ranks, round);
      continue;
    }
    int64_t kept = 0;
    for (int64_t i = 0; kept < count; ++i) {
      out[kept] = out[i];
      kept += out[i] >= 0;
    }
    return by_draw;
  }
}

at::Tensor negative_sample_cpu(const at::Tensor& excluded_adj, int64_t num_ranks, int64_t count,
                               int64_t seed, bool replace, c10::string_view mode_name,
                               int64_t num_src_nodes, int64_t num_dst_nodes,
                               at::ScalarType dtype, int64_t first_round,
                               const std::optional<at::Tensor>& adj_index) {
  const Plan plan = check_negative_sample(excluded_adj, num_ranks, count, replace, mode_name,
                                          num_src_nodes, num_dst_nodes, dtype, first_round);
  if (adj_index.has_value()) {  // checked, not searched: this kernel merges sorted ranks
    check_adj_index("negative_sample", *adj_index, excluded_adj,
                    rng::kept_adj_index_size(excluded_adj.numel(), num_ranks));
  }
  const Mode mode = plan.mode;
  const int64_t columns = plan.columns;
  at::Tensor out = at::empty({2, columns}, excluded_adj.options().dtype(dtype));
  if (count == 0) return out;

  const at::Tensor adj = excluded_adj.contiguous();
  const int64_t* adj_data = adj.const_data_ptr<int64_t>();
  const int64_t num_adj = adj.numel();
  Buffer key_buffer(0), scratch_buffer(0);
  int64_t* keys = nullptr;
  // 32-bit draw indices while they fit (SortedDraws checks it; a top-up round draws more)
  const bool small = 4 * std::max(count, first_round) < (int64_t{1} << 32);
  if (replace) {
    key_buffer = Buffer(count);
    keys = key_buffer.get();
    small ? iid_keys<uint32_t>(num_ranks, count, seed, adj_data, num_adj, keys)
          : iid_keys<int64_t>(num_ranks, count, seed, adj_data, num_adj, keys);
  } else if (count < (num_ranks + 3) / 4) {
    key_buffer = small ? first_distinct_keys<uint32_t>(num_ranks, count, seed, first_round,
                                                       adj_data, num_adj)
                       : first_distinct_keys<int64_t>(num_ranks, count, seed, first_round,
                                                      adj_data, num_adj);
    keys = key_buffer.get();
  } else {  // count >= M / 4: a uniform permutation of the whole complement, cut to count
    key_buffer = Buffer(num_ranks);
    scratch_buffer = Buffer(num_ranks);
    int64_t* ranks = key_buffer.get();
    at::parallel_for(0, num_ranks, kGrain, [&](int64_t begin, int64_t end) {
      std::iota(ranks + begin, ranks + end, begin);
    });
    keys = ranks;
    int64_t* scratch = scratch_buffer.get();
    if (num_adj > 0) {
      ranks_to_keys(ranks, 0, scratch, num_ranks, adj_data, num_adj);
      std::swap(keys, scratch);
    }
    keys = shuffle(keys, scratch, num_ranks, count, seed);
  }

  const Decoder decoder = plan.decoder;
  AT_DISPATCH_INDEX_TYPES(dtype, "negative_sample", [&] {
    index_t* pairs = out.data_ptr<index_t>();
    dispatch_mode(mode, [&](auto mode_tag) {
      write_pairs<decltype(mode_tag)::value>(keys, count, decoder, pairs, columns);
    });
  });
  return out;
}

// The tables of both builds from keys[0, n) in a (values in [0, key_bound], scratch b of n):
// the parallel radix sort on the key bits, a binary search for the dropped key_bound values
// (sorted last), one serial pass that drops repeats, one parallel for adj.
std::tuple<at::Tensor, at::Tensor> excluded_tables(const at::Tensor& a, const at::Tensor& b,
                                                   int64_t key_bound, int bits) {
  const int64_t n = a.numel();
  int64_t* sorted = a.mutable_data_ptr<int64_t>();
  int64_t* scratch = b.mutable_data_ptr<int64_t>();
  NoPayload *no_payload = nullptr, *no_scratch = nullptr;
  radix_sort(sorted, scratch, no_payload, no_scratch, n, bits);
  const int64_t size =
      std::unique(sorted, std::lower_bound(sorted, sorted + n, key_bound)) - sorted;
  at::Tensor unique = (sorted == a.const_data_ptr<int64_t>() ? a : b).narrow(0, 0, size);
  at::Tensor adj = at::empty({size}, a.options());
  int64_t* adj_data = adj.mutable_data_ptr<int64_t>();
  at::parallel_for(0, size, kGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) adj_data[i] = sorted[i] - i;
  });
  return {unique, adj};
}

std::tuple<at::Tensor, at::Tensor> excluded_keys_cpu(const at::Tensor& keys, int64_t key_bound) {
  const int bits = check_excluded_keys(keys, key_bound);
  const at::Tensor a = keys.contiguous().clone();
  return excluded_tables(a, at::empty_like(a), key_bound, bits);
}

// keys[e] = the key of edge e, or encoder.num_keys (dropped) for a pair that is no key or has
// an index out of range; returns the first such out-of-range edge, or n.
template <Mode mode, typename index_t>
int64_t encode_edges(const index_t* src, const index_t* dst, int64_t step, int64_t n,
                     const Encoder encoder, int64_t* keys) {
  std::atomic<int64_t> first_bad{n};
  at::parallel_for(0, n, kGrain, [&](int64_t begin, int64_t end) {
    int64_t bad = n;
    for (int64_t e = begin; e < end; ++e) {
      const int64_t s = static_cast<int64_t>(src[e * step]);
      const int64_t d = static_cast<int64_t>(dst[e * step]);
      const bool ok = encoder.in_range(s, d);
      keys[e] = ok ? encoder.key<mode>(s, d) : encoder.num_keys;
      if (!ok && bad == n) bad = e;
    }
    record_bad_row(first_bad, bad);
  });
  return first_bad.load();
}

// excluded_edge_keys: one parallel pass that validates the edges and encodes their keys, then
// excluded_keys' tables; first_bad comes back as a [1] CPU tensor, as from the CUDA kernel.
std::tuple<at::Tensor, at::Tensor, at::Tensor> excluded_edge_keys_cpu(
    const at::Tensor& edge_index, c10::string_view mode_name, int64_t num_src_nodes,
    int64_t num_dst_nodes) {
  const EdgeKeys plan = check_excluded_edge_keys(edge_index, mode_name, num_src_nodes,
                                                 num_dst_nodes);
  const int64_t n = edge_index.size(1);
  const at::Tensor a = at::empty({n}, edge_index.options().dtype(at::kLong));
  int64_t first_bad = n;
  AT_DISPATCH_INDEX_TYPES(edge_index.scalar_type(), "excluded_edge_keys", [&] {
    const index_t* src = edge_index.const_data_ptr<index_t>();
    const index_t* dst = src + edge_index.stride(0);
    const int64_t step = edge_index.stride(1);
    int64_t* keys = a.mutable_data_ptr<int64_t>();
    dispatch_mode(plan.mode, [&](auto mode_tag) {
      first_bad = encode_edges<decltype(mode_tag)::value>(src, dst, step, n, plan.encoder, keys);
    });
  });
  at::Tensor excluded, adj;
  std::tie(excluded, adj) =
      excluded_tables(a, at::empty_like(a), plan.encoder.num_keys, plan.bits);
  return {excluded, adj, at::full({1}, first_bad < n ? first_bad : -1, at::kLong)};
}

}  // namespace

// The kept index, the CUDA kernel's values: the draw above merges sorted ranks with adj and
// searches none, edge_dot_loss's C++ kernels search it (csrc/cpu/adj_index.h).
at::Tensor negative_sample_index_cpu(const at::Tensor& excluded_adj, int64_t num_ranks) {
  check_negative_sample_index(excluded_adj, num_ranks);
  AdjIndex index;
  const at::Tensor bucket = cpu::build_kept_adj_index(excluded_adj.contiguous(), num_ranks,
                                                      index);
  return bucket.defined() ? bucket : at::empty({0}, excluded_adj.options());
}

TORCH_LIBRARY_IMPL(pyg_edgedot, CPU, m) {
  m.impl("negative_sample", &negative_sample_cpu);
  m.impl("negative_sample_index", &negative_sample_index_cpu);
  m.impl("excluded_keys", &excluded_keys_cpu);
  m.impl("excluded_edge_keys", &excluded_edge_keys_cpu);
}

}  // namespace pyg_edgedot
