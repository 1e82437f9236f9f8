// Exact negative sampling over one graph (NegativeSampler and its draws): the schemas. The kernels:
// csrc/cpu/negative_sampling_kernel.cpp (CPU) and csrc/cuda/negative_sampling_kernel.cu (CUDA),
// sharing csrc/negative_sampling_common.h. What each device promises for a given `seed`: the
// two kernels return the same draws, bit for bit (the CUDA kernel computes them by parallel
// steps; see its header). Without a compiled kernel for the device, the
// pure-PyTorch implementation registered from pyg_edgedot/ops/negative_sampling.py serves: it
// draws from the same distribution with a torch generator seeded with `seed`, so its draws
// differ from the kernels'.
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(pyg_edgedot, m) {
  // The complement of a graph's excluded keys holds num_ranks = M keys; its rank r is the key
  // r + #{i : excluded_adj[i] <= r}, where excluded_adj [A] int64 is adj_i = e_i - i of the
  // sorted unique excluded keys e_i (non-decreasing; num_ranks + A must be the key space's
  // size). mode: "directed" (key = src * N_dst + dst), "no_loops" (src * (N_dst - 1) + dst,
  // dst skipping src) or "undirected" (the index of (i < j) in the strict upper triangle of
  // N_src nodes).
  // replace=False: `count` distinct keys (count <= M), a uniform count-subset of the
  // complement in uniform random order (for count < M / 4 the first `count` distinct ranks of
  // the i.i.d. rank stream, in order of first appearance); replace=True: `count` i.i.d.
  // uniform keys (the stream's first `count` ranks).
  // Returns [2, count] pairs (src; dst) in `dtype` (int32 or int64); "undirected" returns
  // [2, 2 * count]: the pairs (i < j), then their mirrors (j, i).
  // The draws are a pure function of the arguments (a counter-based generator seeded with
  // `seed`; see the kernels), whatever the device, the number of threads or the GPU.
  // first_round: how many i.i.d. ranks the first round of a sparse replace=False draw takes
  // (-1: enough that a second round is rare; tests pass fewer to exercise the top-up rounds).
  // The draw does not depend on it.
  // adj_index: negative_sample_index(excluded_adj, num_ranks), kept by a caller that draws
  // many times from one graph (NegativeSampler), or None: the CUDA kernel then builds it per
  // call, which costs more than a small draw from a large graph (the C++ kernel merges sorted
  // ranks with adj and only checks it). The draw does not depend on it either. A tensor of
  // another size is an error; other values give wrong keys, never a bad access.
  m.def("negative_sample(Tensor excluded_adj, int num_ranks, int count, int seed, "
        "bool replace, str mode, int num_src_nodes, int num_dst_nodes, ScalarType dtype, "
        "int first_round=-1, Tensor? adj_index=None) -> Tensor");
  // The index through which the kernels map ranks below num_ranks to keys (negative_sample's
  // on CUDA, edge_dot_loss's on both devices): int64 bucket bounds over excluded_adj
  // (counter_rng.h's AdjIndex, kept plan: one bucket per 4-8 keys), the same values on the
  // CPU and CUDA; [0] where excluded_adj is too short to index (under 4,096 keys).
  m.def("negative_sample_index(Tensor excluded_adj, int num_ranks) -> Tensor");
  // The sorted distinct values below key_bound of `keys` (1-D int64, every value in
  // [0, key_bound]: key_bound marks a pair that is no key, e.g. a self-loop, and is dropped)
  // and their adj_i = e_i - i: what negative_sample's excluded_adj is made of. The kernels
  // sort only the bits of key_bound (log2(N^2) at N nodes, against torch.sort's 64); a value
  // outside [0, key_bound] is a caller's bug that gives a wrong order, never a bad access.
  m.def("excluded_keys(Tensor keys, int key_bound) -> (Tensor, Tensor)");
  // One graph's build (NegativeSampler): excluded_keys of the keys of edge_index's columns in
  // `mode`'s key space over num_src_nodes x num_dst_nodes nodes (negative_sample's modes;
  // "no_loops" and "undirected" take num_src_nodes == num_dst_nodes and have no key for a
  // self-loop, which is dropped), in one op whose only host sync reads back the output's size.
  // edge_index: [2, E] int32 or int64, any strides. A column with an index out of range is
  // dropped too and the first one reported in first_bad, a [1] int64 CPU tensor (-1: none)
  // read back with the size, so that Python raises the IndexError users see with no sync of
  // its own.
  m.def("excluded_edge_keys(Tensor edge_index, str mode, int num_src_nodes, "
        "int num_dst_nodes) -> (Tensor, Tensor, Tensor)");
}
