"""``python -m pyg_edgedot``: a short report of the build and the backend of each op group.

``python -m pyg_edgedot --build`` builds the extension now (or loads it from the cache) and,
if a build fails, shows the compiler's full output.
"""
import argparse
import os
import subprocess
import sys

_NAMES = {"cuda": "fused CUDA kernel", "cpp": "fused C++ kernel", "triton": "Triton kernels",
          "python": "pure-PyTorch fallback (slow)",
          "composite": "Python over the fused ops"}


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
    from pyg_edgedot import _backend, _build

    loaded = _backend.loaded()
    build = loaded.build
    wanted = "cuda" if _build.cuda_unbuildable(loaded.config) is None else "cpu"
    if args.build and not loaded.config.force_fallback and build.extension != wanted:
        print("Rebuilding with the compiler's output shown:", flush=True)
        try:
            _build.compile_extension(with_cuda=wanted == "cuda", verbose=True)
        except Exception as err:  # show the reason, then still print the report
            print(f"build failed: {err}", file=sys.stderr)

    from torch.utils.cpp_extension import _get_build_directory
    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    rows = [
        ("pyg_edgedot", f"{pyg_edgedot.__version__} ({os.path.dirname(pyg_edgedot.__file__)})"),
        ("torch", f"{torch.__version__} (CUDA {torch.version.cuda or 'none'})"),
        ("GPUs", ", ".join(gpus) if gpus else "none visible"),
        ("nvcc", _nvcc_version(_build.nvcc_path())),
        ("extension", f"{build.extension or 'not built'}"
                      + (f" ({build.library_path})" if build.library_path else "")),
        ("build cache", _get_build_directory("pyg_edgedot_x", verbose=False).rsplit("/", 1)[0]),
    ]
    if build.cuda_error:
        rows.append(("no CUDA kernel", build.cuda_error))
    if loaded.triton_error and build.extension != "cuda":
        rows.append(("no Triton path", loaded.triton_error))
    if build.cpu_error:
        rows.append(("no C++ kernel", build.cpu_error))
    for device in _backend.DEVICES:
        groups = {}
        for (group, dev), backend in loaded.table.items():
            if dev == device:
                groups.setdefault(backend.impl, []).append(group)
        value = "; ".join(f"{_NAMES[impl]} ({', '.join(names)})"
                          for impl, names in groups.items())
        rows.append((f"backend {device}", value))
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
