#!/usr/bin/env bash
# What every GPU figure in README.md and the issue notes comes from. Run on the H200 through the
# device tool, from the repo root:  bash scripts/h200_run.sh STEP...   (results under $OUT)
# Steps: tests, triton, sanitizer, smoke, profile, bench, beyond, examples, ddp, resources, ncu,
# ncu_bwd, variants, ncu_walk, fwd_variants, tests12, fwd_sorted,
# fwd_sorted_variants, v7.
set -uo pipefail
OUT=${OUT:-/tmp/pyg_edgedot_out}
mkdir -p "$OUT"
export TORCH_EXTENSIONS_DIR=/tmp/pyg_edgedot_ext PYTHONUNBUFFERED=1
python3 -m pip install -q -e . --no-deps --no-build-isolation 2>&1 | grep -v -i warn | tail -2
(time python3 -m pyg_edgedot --build) 2>&1 | tee "$OUT/build.log"
so=$(ls "$TORCH_EXTENSIONS_DIR"/pyg_edgedot_cuda/*.so 2>/dev/null | head -1)

for step in "$@"; do
  echo "=== $step"
  case "$step" in
    tests)
      python3 -m pytest -q -rs -n 8 -p no:cacheprovider tests 2>&1 | tee "$OUT/pytest.log" | tail -15 ;;
    triton)
      # The Triton path, forced by hiding nvcc (CUDA_HOME pointing nowhere): the report must
      # say "Triton kernels", then every CUDA test runs against it (issue 5).
      ( export CUDA_HOME=/nonexistent TORCH_EXTENSIONS_DIR=/tmp/pyg_edgedot_ext_triton
        python3 -m pyg_edgedot 2>&1 | tee "$OUT/triton_report.log" | tail -4
        python3 -m pytest -q -rs -n 8 -p no:cacheprovider -k "cuda or triton" tests 2>&1 \
          | tee "$OUT/pytest_triton.log" | tail -15 ) ;;
    triton_tests)
      # tests/test_triton.py with the extension built (its CUDA cases call the Triton ops).
      python3 -m pytest -q -rs -n 8 -p no:cacheprovider tests/test_triton.py 2>&1 \
        | tee "$OUT/pytest_triton_file.log" | tail -8 ;;
    triton_core)
      # The core ops' CUDA tests through the Triton path (nvcc hidden), a faster subset of
      # the 'triton' step.
      ( export CUDA_HOME=/nonexistent TORCH_EXTENSIONS_DIR=/tmp/pyg_edgedot_ext_triton
        python3 -m pyg_edgedot 2>&1 | tail -2
        timeout 300 python3 -m pytest -q -rs -n 12 -p no:cacheprovider -k cuda \
          tests/test_edge_dot.py tests/test_grad.py tests/test_compile.py tests/test_errors.py \
          tests/test_nn.py 2>&1 | tee "$OUT/pytest_triton_core.log" | tail -15 ) ;;
    triton_defaults)
      # The Triton path with nvcc hidden and no CUDA build at all: its own tests and the core
      # CUDA tests (run 5, after the backward defaults changed).
      ( export CUDA_HOME=/nonexistent TORCH_EXTENSIONS_DIR=/tmp/pyg_edgedot_ext_triton
        python3 -m pyg_edgedot 2>&1 | tail -2
        timeout 170 python3 -m pytest -q -n 16 -p no:cacheprovider -k cuda tests/test_triton.py \
          tests/test_grad.py tests/test_edge_dot.py tests/test_compile.py 2>&1 \
          | tee "$OUT/pytest_triton_defaults.log" | tail -3 ) ;;
    beyond)
      # Ranking, candidate scoring, DistMult and the Triton path against their peers (issue 5).
      python3 benchmarks/bench_beyond.py --out "$OUT/beyond.json" 2>&1 | tee "$OUT/beyond.log" \
        | tail -40 ;;
    beyond_triton)
      python3 benchmarks/bench_beyond.py --sections triton --out "$OUT/beyond_triton.json" 2>&1 \
        | tee "$OUT/beyond_triton.log" | tail -14 ;;
    ddp)
      # examples/ddp_link_pred.py under torchrun with NCCL, one process on the one GPU (issue 4).
      torchrun --standalone --nproc_per_node 1 examples/ddp_link_pred.py --device cuda \
        --num-nodes 200000 --avg-degree 20 --neg-sampling uniform --epochs 3 --no-progress \
        --json "$OUT/ddp_nccl_1gpu.json" 2>&1 | tail -6 ;;
    sanitizer)
      # A plain torch program first, to tell a sanitizer/environment problem from ours.
      compute-sanitizer --tool memcheck python3 -c \
        "import torch; print((torch.ones(4, device='cuda') + 1).sum().item())" 2>&1 | tail -3
      python3 scripts/oob_probe.py 2>&1 | tail -3
      compute-sanitizer --tool memcheck --print-limit 20 python3 scripts/oob_probe.py \
        > "$OUT/sanitizer.log" 2>&1
      tail -6 "$OUT/sanitizer.log" ;;
    smoke)
      python3 scripts/h200_smoke.py "$OUT/smoke.json" 2>&1 | tee "$OUT/smoke.log" | tail -6 ;;
    profile)
      python3 scripts/profile_kernels.py > "$OUT/profile.log" 2>&1
      grep -E "^==|edge_dot|Radix|rowptr|make_sort|Self CUDA time total" "$OUT/profile.log" \
        | sed -E 's/void pyg_edgedot::\(anonymous namespace\):://; s/ +0\.00%//g; s/ +0\.000us//g' \
        | cut -c1-150 ;;
    resources)
      cuobjdump --dump-resource-usage "$so" 2>&1 | grep -E "Function|REG" | \
        sed -E 's/_ZN[0-9A-Za-z_]*(edge_dot[a-z_]*kernel|permute[a-z_]*|rowptr[a-z_]*|make_sort[a-z_]*)/\1/' \
        | head -60 > "$OUT/resources.log"; head -40 "$OUT/resources.log" ;;
    bench)
      python3 benchmarks/bench_edge_dot.py --out "$OUT/bench.json" --plot "$OUT/bench.png" \
        2>&1 | tee "$OUT/bench.log" | tail -60 ;;
    examples)
      # Mean epoch time with ~17M scored edges per epoch (issue 4), both decoders, one seed.
      for dec in edgedot eager; do
        python3 examples/link_pred.py --device cuda --num-nodes 1000000 --avg-degree 20 \
          --neg-sampling uniform --epochs 4 --no-progress --decoder $dec \
          --json "$OUT/link_pred_gpu_$dec.json" 2>&1 | tail -4
      done ;;
    ncu)
      # Counters for the forward kernel at W4 (bf16), for the next tuning round.
      ncu --clock-control none -k regex:edge_dot_fwd -c 1 --section SpeedOfLight \
        --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis \
        python3 scripts/profile_kernels.py W4 > "$OUT/ncu_w4_fwd.log" 2>&1
      grep -E "Throughput|Occupancy|Registers|Duration|L1|L2 Hit|DRAM" "$OUT/ncu_w4_fwd.log" | head -30 ;;
    ncu_bwd)
      # Counters for the backward's rows kernel at W3 (fp32): why it gathers at ~2.7 TB/s
      # while the forward gathers at ~4.2 TB/s (issue 3).
      ncu --clock-control none -k regex:grad_rows -c 1 --section SpeedOfLight \
        --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis \
        --section WarpStateStats python3 scripts/profile_kernels.py W3 > "$OUT/ncu_w3_rows.log" 2>&1
      grep -E "Throughput|Occupancy|Registers|Duration|L1|L2 Hit|DRAM|Stall|Warp Cycles" \
        "$OUT/ncu_w3_rows.log" | head -40 ;;
    variants)
      # v5: the backward's row-kernel variants against v4's, bit-for-bit check then timings.
      python3 scripts/grad_variants.py "$OUT/grad_variants.json" 2>&1 | tee "$OUT/grad_variants.log" ;;
    fwd_variants)
      # v6: the forward with and without source-row reuse, 4 or 8 edges in flight, same bits;
      # W1's forward + backward without a cache flush, with a profile.
      python3 scripts/fwd_variants.py "$OUT/fwd_variants.json" 2>&1 | tee "$OUT/fwd_variants.log" ;;
    fwd_sorted)
      # Why compile's forward wins in source-sorted order; what validate=True costs
      # (scripts/fwd_sorted_probe.py; benchmarks/NOTES.md, v6 follow-up).
      python3 scripts/fwd_sorted_probe.py validate "$OUT/validate.json" 2>&1 \
        | tee "$OUT/validate.log" | tail -3
      python3 scripts/fwd_sorted_probe.py variants "$OUT/fwd_sorted.json" 2>&1 \
        | tee "$OUT/fwd_sorted.log" | tail -6
      TORCH_LOGS=output_code ncu --clock-control none --profile-from-start off \
        --section SpeedOfLight --section MemoryWorkloadAnalysis \
        --section MemoryWorkloadAnalysis_Tables --section Occupancy --section LaunchStats \
        --section WarpStateStats --section SchedulerStats \
        python3 scripts/fwd_sorted_probe.py ncu > "$OUT/ncu_fwd_sorted.txt" 2>&1
      grep -E "^  [a-z_]+.*\(|Duration|DRAM Throughput|L1/TEX Hit|L2 Hit|Achieved Occ|Registers Per|Grid Size|Block Size|Warp Cycles Per Issued|Theoretical Occ" \
        "$OUT/ncu_fwd_sorted.txt" | cut -c1-120 | head -40 ;;
    fwd_sorted_variants)
      # Round 2 of fwd_sorted: the variants only (8-11: fewer edges in flight, more blocks),
      # and their registers and stack.
      python3 scripts/fwd_sorted_probe.py variants "$OUT/fwd_sorted2.json" 2>&1 \
        | tee "$OUT/fwd_sorted2.log" | tail -6
      cuobjdump --dump-resource-usage "$TORCH_EXTENSIONS_DIR"/fwd_sorted_variants/*.so 2>&1 \
        | grep -E "Function|REG" > "$OUT/fwd_sorted_variants_resources.log" ;;
    v7)
      # For the forward's v7 change (2 edges in flight, 4 blocks per SM: commit 04e30d2,
      # reverted untested; benchmarks/NOTES.md, v7), once it is applied again: the CUDA cases
      # of every test file that runs the forward, then the benchmark at W1-W6 (W7 and the
      # 2^31+1 forward ran on v6).
      timeout 125 python3 -m pytest -q -rs -n 16 -p no:cacheprovider -k cuda \
        tests/test_edge_dot.py tests/test_grad.py tests/test_properties.py tests/test_relation.py \
        tests/test_errors.py tests/test_compile.py tests/test_nn.py tests/test_fallback.py 2>&1 \
        | tee "$OUT/pytest_cuda_forward.log" | tail -4
      python3 benchmarks/bench_edge_dot.py --workloads W1,W2,W3,W4,W5,W6 --skip-giant \
        --out "$OUT/bench.json" --plot "$OUT/bench.png" 2>&1 | tee "$OUT/bench.log" | tail -3 ;;
    tests12)
      # The full suite, 16 workers (12 took 392-410+ s), within the device call's 600 s with a
      # cold build (~90 s): run it alone in a call.
      timeout 490 python3 -m pytest -q -rs -n 16 -p no:cacheprovider --durations=60 tests \
        2>&1 | tee "$OUT/pytest.log" | tail -15 ;;
    ncu_walk)
      # Counters for v5's walking row kernel at W3 (fp32), as ncu_bwd for v4's.
      ncu --clock-control none -k regex:grad_walk -c 1 --section SpeedOfLight \
        --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis \
        --section WarpStateStats python3 scripts/profile_kernels.py W3 > "$OUT/ncu_w3_walk.log" 2>&1
      grep -E "Throughput|Occupancy|Registers|Duration|L1|L2 Hit|DRAM|Stall|Warp Cycles" \
        "$OUT/ncu_w3_walk.log" | head -40 ;;
    *) echo "unknown step $step" ;;
  esac
done
