"""``python -m pyg_edgedot``: a short report of the build and the backend of each device.

``python -m pyg_edgedot --build`` builds the extension now (or loads it from the cache) and,
if a build fails, shows the compiler's full output.
"""
import argparse
import os
import subprocess
import sys


def _nvcc_version(nvcc):
    if nvcc is None:
        return "not found"
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=30)
        lines = [ln for ln in out.stdout.splitlines() if "release" in ln]
        return f"{nvcc} ({lines[-1].strip() if lines else 'version unknown'})"
    except (OSError, subprocess.SubprocessError) as err:
        return f"{nvcc} (not runnable: {err})"


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m pyg_edgedot", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", action="store_true",
                        help="build the extension now; on failure, print the full build log")
    args = parser.parse_args(argv)

    import torch
    import pyg_edgedot
    from pyg_edgedot import _ops

    if args.build and _ops.STATE["extension"] != ("cuda" if _ops.cuda_buildable() is None
                                                   else "cpu"):
        print("Rebuilding with the compiler's output shown:", flush=True)
        try:
            _ops._build(with_cuda=_ops.cuda_buildable() is None, verbose=True)
        except Exception as err:  # show the reason, then still print the report
            print(f"build failed: {err}", file=sys.stderr)

    from torch.utils.cpp_extension import _get_build_directory
    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    state = _ops.STATE
    rows = [
        ("pyg_edgedot", f"{pyg_edgedot.__version__} ({os.path.dirname(pyg_edgedot.__file__)})"),
        ("torch", f"{torch.__version__} (CUDA {torch.version.cuda or 'none'})"),
        ("GPUs", ", ".join(gpus) if gpus else "none visible"),
        ("nvcc", _nvcc_version(_ops.nvcc_path())),
        ("extension", f"{state['extension'] or 'not built'}"
                      + (f" ({state['library_path']})" if state["library_path"] else "")),
        ("build cache", _get_build_directory("pyg_edgedot_x", verbose=False).rsplit("/", 1)[0]),
    ]
    if state["cuda_error"]:
        rows.append(("no CUDA kernel", state["cuda_error"]))
    if state.get("triton_error") and state["extension"] != "cuda":
        rows.append(("no Triton path", state["triton_error"]))
    if state["cpu_error"]:
        rows.append(("no C++ kernel", state["cpu_error"]))
    names = {"cuda": "fused CUDA kernel", "cpp": "fused C++ kernel",
             "triton": "Triton kernels (edge_dot; the other ops: pure PyTorch)",
             "python": "pure-PyTorch fallback (slow)"}
    for device, backend in pyg_edgedot.backends().items():
        rows.append((f"backend {device}", names[backend]))
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
