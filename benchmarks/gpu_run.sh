#!/usr/bin/env bash
# Every GPU figure and check that README.md publishes comes from one step of this script, run
# on the GPU machine through the device tool, from the repo root:
#
#   export OUT; bash benchmarks/gpu_run.sh STEP...        (results under $OUT)
#
# Result files are named after the GPU's model, <gpu> below (h200 for an NVIDIA H200, h100
# for an H100 80GB HBM3): the device tool lends either, and their figures differ.
#
# Steps (on an H100: tests takes more than a device call's 10 minutes, 5,217 of 5,529 ids in
# a 570 s call with its 114 s build; bench about 300 s with a cold build; triton and fallback
# build no CUDA; fallback took more than a call while it ran test_triton.py's CUDA cases too:
# the first 570 s call ended 4,664 ids, the second 853 more, 452 of them Triton cases; without
# them (10a75a3), 2,588 of its 4,992 ids ended in 121 s of pytest, and 1,915 more in 259 s;
# CALL_LIMIT, the call's seconds, lets the pytest steps take what is left after the others):
#   tests      the full suite with the CUDA extension (TESTS_ARGS: extra pytest arguments,
#              e.g. TESTS_ARGS='-k "cuda or triton"' for the CUDA cases alone; TESTS_AFTER:
#              the pytest.log of earlier runs that the call's limit cut, space-separated, to
#              run only the ids they did not pass or skip; rename $OUT/pytest.log first)
#   triton     the CUDA and Triton tests with nvcc hidden, so CUDA tensors take the Triton path
#              (TRITON_ARGS: the pytest arguments instead of -k "cuda or triton" tests; with
#              TRITON_AFTER, as TESTS_AFTER for this step, the selection without a path). No
#              CUDA build: it builds the C++ kernels alone (~25 s); 83% of its tests ended in 250 s
#   fallback   the full suite with PYG_EDGEDOT_FORCE_FALLBACK=1 (pure PyTorch, no build);
#              FALLBACK_AFTER as TESTS_AFTER for this step
#              (triton and fallback leave out tests/test_triton.py's CUDA cases, which run the
#              same in every mode and so in `tests`; ONCE=0 keeps them: see once() below)
#   sanitizer  compute-sanitizer memcheck on benchmarks/oob_probe.py (bad indices): 0 errors
#   memcheck   compute-sanitizer memcheck on the CUDA tests in MEMCHECK_ARGS (default: the
#              small-E fused backward's float32 tests) with the extension this script built
#              -> memcheck.log (run it in this script: outside it, the build lands in another
#              cache, and building under the sanitizer takes the whole call); MEMCHECK_TIMEOUT
#              (default 400 s) bounds it
#   bench      benchmarks/bench_edge_dot.py -> <gpu>.{json,log,png} (README "Performance");
#              BENCH_ARGS adds arguments (e.g. '--workloads W1': the host-overhead table
#              and W1's rows alone; '--workloads W3 --orders random --methods pyg_edgedot
#              --sections peers --profile': W3's time by kernel)
#   hostw1     the host-overhead table alone (W1) -> <gpu>_host_w1.{json,log,png}
#   sampling   the sampler's CUDA tests first (the CUDA kernel's draws equal the C++ kernel's,
#              bit for bit, and every guarantee on CUDA tensors) -> pytest_sampling.log, then
#              benchmarks/bench_negative_sampling.py (SAMPLING_GRAPHS, default all three;
#              "backend" in its output must say cuda) -> <gpu>_negative_sampling.{json,log};
#              SAMPLING_TESTS=0 skips the tests (after a full-suite run); SAMPLING_ARGS adds
#              arguments (e.g. --profile: device time by kernel of one sample and one build)
#   loss       benchmarks/bench_edge_dot_loss.py at W3 (2.93M nodes, E = 30M, D = 128, K = 1)
#              -> <gpu>_edge_dot_loss.{json,log}
#   beyond     benchmarks/bench_beyond.py -> <gpu>_beyond.{json,log} (README "Beyond the peers")
#   topk       benchmarks/bench_topk.py: 100K x 1M, D = 64, k = 20, fp32 and bf16, 10M excluded
#              pairs; ours vs chunked mm + topk vs faiss's GPU search (PyG's MIPSKNNIndex) ->
#              <gpu>_topk.{json,log}. The device machine reaches no registry: for the faiss row,
#              carry a faiss-gpu wheel and set FAISS_WHEEL=path (without it, one quick pip try,
#              then the row says "faiss-gpu not installed")
#   examples   examples/link_pred.py, both decoders -> link_pred_gpu_{edgedot,eager}.json
#   e2e        examples/link_pred.py at 1M nodes / 10M undirected edges, PyG's pipeline
#              (torch_geometric.utils.negative_sampling + the eager decoder; 2 epochs, the
#              first is warm-up) vs ours (NegativeSampler + EdgeDotScore; and --loss fused)
#              -> link_pred_gpu_e2e_{pyg,edgedot,fused}.json (mean epoch time)
#   ddp        examples/ddp_link_pred.py under torchrun, NCCL, 1 GPU -> ddp_nccl_1gpu_<gpu>.json
#   ncu        Nsight Compute on the forward kernel of ours and of torch.compile, one launch
#              each (the warm-up), at NCU_WORKLOAD (default W3) in NCU_ORDER (default sorted):
#              throughput, memory, occupancy, launch and warp-state sections
#              -> ncu_fwd_<workload>_<order>.log (NOTES.md, Next: "Sorted-order forward on
#              the H200"). NCU_KERNELS, a regex, picks other kernels (e.g.
#              'small_fused|index_put' with NCU_WORKLOAD=W1: the small-E backward against
#              compile's kernels, NOTES.md, Next: "W1 forward + backward on the H200"); NCU_SKIP
#              and NCU_COUNT (default 1 and 1) which of the matching launches are profiled
# The result files carry the names they have in benchmarks/results/: copy them there to
# publish a run (history stays in git).
set -uo pipefail
OUT=${OUT:-/tmp/pyg_edgedot_out}
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr 'A-Z' 'a-z' \
  | grep -oE '[a-z][0-9]{2,4}[a-z]?' | head -1)
GPU=${GPU:-gpu}
mkdir -p "$OUT"
export TORCH_EXTENSIONS_DIR=/tmp/pyg_edgedot_ext PYTHONUNBUFFERED=1
python3 -m pip install -q -e . --no-deps --no-build-isolation 2>&1 | grep -v -i warn | tail -2
# The CUDA build, unless every step is `fallback` (pure PyTorch: nothing to build) or `triton`
# (nvcc hidden: it builds the C++ kernels alone, in a cache of its own).
if [ -n "$(printf '%s\n' "$@" | grep -vxE 'fallback|triton')" ]; then
  (time python3 -m pyg_edgedot --build) 2>&1 | tee "$OUT/build.log"
fi

pytest_all() {  # the suite, 16 workers; 490 s leaves room for a cold build in a 600 s call.
  # -v: each test's outcome as it ends. The timeout interrupts (SIGINT, as Ctrl-C) rather than
  # kills, so a cut run still ends with its failures' tracebacks, the -rfs summary and the
  # slowest tests (--durations; seconds after the signal, SIGKILL 15 s later if not).
  # CALL_LIMIT (seconds since this script started) cuts it 25 s before, so a suite after other
  # steps (e.g. `CALL_LIMIT=570 gpu_run.sh bench tests`) takes what the call has left and its
  # log returns.
  local limit=${PYTEST_TIMEOUT:-490} left
  if [ -n "${CALL_LIMIT:-}" ]; then
    left=$((CALL_LIMIT - SECONDS - 25))
    [ "$left" -lt "$limit" ] && limit=$left
  fi
  if [ "$limit" -lt 30 ]; then echo "no time left for pytest ($limit s)"; return 0; fi
  timeout -s INT -k 15 "$limit" python3 -m pytest -v -rfs --durations=25 -n 16 \
    -p no:cacheprovider "$@" 2>&1
}

# tests/test_triton.py's CUDA cases (538 ids) call the Triton module itself, whatever the
# switches say (nvcc hidden, the forced fallback), so the `tests` step runs them and `triton`
# and `fallback` deselect them; ONCE=0 keeps them there too.
once() { [ "${ONCE:-1}" = 0 ] || echo "--deselect tests/test_triton.py::test_cuda_"; }

rest_of() {  # "@file" of the test ids that the cut runs' logs in $1 (space-separated) did not
  # end, of those that pytest's arguments in $2 (e.g. $(once)) select
  COLLECT_ARGS="${2:-}" python3 - $1 > /tmp/tests_rest.txt <<'PY'
import os, re, subprocess, sys
ended = set()
for log in sys.argv[1:]:
    for line in open(log):
        m = re.search(r"\b(?:PASSED|SKIPPED|XFAIL|XPASS) (tests/\S.*?)\s*$", line)
        if m:
            ended.add(m.group(1))
out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p",
                      "no:cacheprovider", "tests", *os.environ["COLLECT_ARGS"].split()],
                     capture_output=True, text=True).stdout
rest = [i for i in (line.strip() for line in out.splitlines()) if "::" in i and i not in ended]
print(*rest, sep="\n")
print(f"{len(rest)} test ids left after {len(ended)} finished in {' '.join(sys.argv[1:])}",
      file=sys.stderr)
PY
  echo @/tmp/tests_rest.txt
}

for step in "$@"; do
  echo "=== $step"
  case "$step" in
    tests)
      targets=tests
      [ -n "${TESTS_AFTER:-}" ] && targets=$(rest_of "$TESTS_AFTER")
      eval "pytest_all $targets ${TESTS_ARGS:-}" | tee "$OUT/pytest.log" \
        | grep -E "FAILED|ERROR| passed| failed" | tail -25 ;;
    triton)
      # nvcc hidden (CUDA_HOME pointing nowhere, a build cache of its own): the report must
      # say "Triton kernels", then every CUDA and Triton test runs against that path.
      ( export CUDA_HOME=/nonexistent TORCH_EXTENSIONS_DIR=/tmp/pyg_edgedot_ext_triton
        python3 -m pyg_edgedot 2>&1 | tee "$OUT/triton_report.log" | tail -4
        selection=${TRITON_ARGS:--k \"cuda or triton\" tests}
        [ -n "${TRITON_AFTER:-}" ] \
          && selection="$(rest_of "$TRITON_AFTER" "$(once)") ${TRITON_ARGS:--k \"cuda or triton\"}"
        eval "pytest_all $selection $(once)" \
          | tee "$OUT/pytest_triton.log" | grep -E "FAILED|ERROR| passed| failed" | tail -25 ) ;;
    fallback)
      ( export PYG_EDGEDOT_FORCE_FALLBACK=1
        targets=tests
        [ -n "${FALLBACK_AFTER:-}" ] && targets=$(rest_of "$FALLBACK_AFTER" "$(once)")
        pytest_all $targets $(once) | tee "$OUT/pytest_fallback.log" \
          | grep -E "FAILED|ERROR| passed| failed" | tail -25 ) ;;
    sanitizer)
      # A plain torch program first, to tell a sanitizer/environment problem from ours.
      compute-sanitizer --tool memcheck python3 -c \
        "import torch; print((torch.ones(4, device='cuda') + 1).sum().item())" 2>&1 | tail -3
      python3 benchmarks/oob_probe.py 2>&1 | tail -3
      compute-sanitizer --tool memcheck --print-limit 20 python3 benchmarks/oob_probe.py \
        > "$OUT/sanitizer.log" 2>&1
      tail -6 "$OUT/sanitizer.log" ;;
    memcheck)
      eval "timeout ${MEMCHECK_TIMEOUT:-400} compute-sanitizer --tool memcheck --print-limit 20 \
        python3 -m pytest -q -p no:cacheprovider \
        ${MEMCHECK_ARGS:-tests/test_grad.py -k \"cuda and small and float32\"}" \
        > "$OUT/memcheck.log" 2>&1
      tail -4 "$OUT/memcheck.log" ;;
    bench)
      # The host-overhead table at W1, then W1-W7 x {random, sorted} x every peer + the giant.
      python3 benchmarks/bench_edge_dot.py --out "$OUT/${GPU}.json" --plot "$OUT/${GPU}.png" \
        ${BENCH_ARGS:-} 2>&1 | tee "$OUT/${GPU}.log" | tail -60 ;;
    hostw1)
      python3 benchmarks/bench_edge_dot.py --sections host --out "$OUT/${GPU}_host_w1.json" 2>&1 \
        | tee "$OUT/${GPU}_host_w1.log" | tail -12 ;;
    sampling)
      if [ "${SAMPLING_TESTS:-1}" != 0 ]; then
        pytest_all tests/test_negative_sampling.py -k cuda | tee "$OUT/pytest_sampling.log" \
          | tail -8
      fi
      python3 benchmarks/bench_negative_sampling.py --device cuda \
        --graphs "${SAMPLING_GRAPHS:-cora,100k_2m,1m_20m}" ${SAMPLING_ARGS:-} \
        --out "$OUT/${GPU}_negative_sampling.json" 2>&1 | tee "$OUT/${GPU}_negative_sampling.log" \
        | tail -30 ;;
    loss)
      python3 benchmarks/bench_edge_dot_loss.py --device cuda --out "$OUT/${GPU}_edge_dot_loss.json" \
        2>&1 | tee "$OUT/${GPU}_edge_dot_loss.log" | tail -30 ;;
    beyond)
      # Ranking, candidate scoring, DistMult, and the Triton path (a PYG_EDGEDOT_CUDA=0 child).
      python3 benchmarks/bench_beyond.py --out "$OUT/${GPU}_beyond.json" 2>&1 \
        | tee "$OUT/${GPU}_beyond.log" | tail -40 ;;
    topk)
      # faiss on the GPU for the peer row; the benchmark runs (faiss row n/a) without it.
      python3 -c "import faiss; faiss.StandardGpuResources" 2>/dev/null \
        || timeout 60 python3 -m pip install -q --retries 0 --timeout 5 \
             "${FAISS_WHEEL:-faiss-gpu-cu12}" 2>&1 | tail -2
      python3 benchmarks/bench_topk.py --device cuda --out "$OUT/${GPU}_topk.json" 2>&1 \
        | tee "$OUT/${GPU}_topk.log" | tail -40 ;;
    examples)
      # Mean epoch time with ~17M scored edges per epoch, both decoders, one seed.
      for dec in edgedot eager; do
        python3 examples/link_pred.py --device cuda --num-nodes 1000000 --avg-degree 20 \
          --neg-sampling uniform --epochs 4 --no-progress --decoder $dec \
          --json "$OUT/link_pred_gpu_$dec.json" 2>&1 | tail -4
      done ;;
    e2e)
      big="--device cuda --num-nodes 1000000 --avg-degree 20 --no-progress"
      python3 examples/link_pred.py $big --neg-sampling pyg --decoder eager --epochs 2 \
        --json "$OUT/link_pred_gpu_e2e_pyg.json" 2>&1 | tail -3
      python3 examples/link_pred.py $big --epochs 4 --json "$OUT/link_pred_gpu_e2e_edgedot.json" \
        2>&1 | tail -3
      python3 examples/link_pred.py $big --epochs 4 --loss fused \
        --json "$OUT/link_pred_gpu_e2e_fused.json" 2>&1 | tail -3 ;;
    ddp)
      # examples/ddp_link_pred.py under torchrun with NCCL, one process on the one GPU.
      torchrun --standalone --nproc_per_node 1 examples/ddp_link_pred.py --device cuda \
        --num-nodes 200000 --avg-degree 20 --neg-sampling uniform --epochs 3 --no-progress \
        --json "$OUT/ddp_nccl_1gpu_${GPU}.json" 2>&1 | tail -6 ;;
    ncu)
      w=${NCU_WORKLOAD:-W3}; o=${NCU_ORDER:-sorted}; log="$OUT/ncu_fwd_${w}_${o}.log"
      kernels=${NCU_KERNELS:-edge_dot_fwd|triton_}
      : > "$log"
      for method in pyg_edgedot compile; do
        # Skip the first call (compile's includes its compilation); profile the warm-up.
        ncu --target-processes all -k "regex:$kernels" --launch-skip "${NCU_SKIP:-1}" \
          --launch-count "${NCU_COUNT:-1}" --section SpeedOfLight \
          --section MemoryWorkloadAnalysis \
          --section Occupancy --section LaunchStats --section WarpStateStats \
          python3 benchmarks/bench_edge_dot.py --sections peers --workloads "$w" --orders "$o" \
            --methods "$method" --reps 1 --warmups 1 --skip-giant --out "$OUT/ncu_bench.json" \
          >> "$log" 2>&1
      done
      keys="Duration|DRAM Throughput|Memory Throughput|Registers Per|Achieved Occ|Theoretical Occ"
      grep -E "^  [^ ].*\(|$keys|Block Limit" "$log" | head -40 ;;
    *) echo "unknown step $step (steps: tests triton fallback sanitizer memcheck bench hostw1 sampling loss beyond topk examples e2e ddp ncu)"
       exit 2 ;;
  esac
done
