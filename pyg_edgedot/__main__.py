"""``python -m pyg_edgedot``: a short report of the build and the backend of each op group.

``python -m pyg_edgedot --build`` makes sure the kernels are built now (for example in a
Docker image layer, so that the first import in a container does not compile): it builds
them if this import did not find or build them, retrying a recorded failure, prints the
compiler's output if the build fails, and exits non-zero unless the kernels for this machine
(CUDA where torch is a CUDA build and nvcc is found, else CPU) are built.
"""
import argparse
import os
import subprocess
import sys

_NAMES = {"cuda": "fused CUDA kernel", "cpp": "fused C++ kernel", "triton": "Triton kernels",
          "python": "pure-PyTorch fallback (slow)",
          "composite": "Python over the fused ops"}
_ORIGINS = {"package": "compiled at install time", "cache": "from the build cache",
            "built": "built now"}


def _nvcc_version(nvcc):
    if nvcc is None:
        return "not found"
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=30)
        lines = [ln for ln in out.stdout.splitlines() if "release" in ln]
        return f"{nvcc} ({lines[-1].strip() if lines else 'version unknown'})"
    except (OSError, subprocess.SubprocessError) as err:
        return f"{nvcc} (not runnable: {err})"


def _build_now(loaded, _build) -> int:
    build, config = loaded.build, loaded.config
    if config.force_fallback:
        print("PYG_EDGEDOT_FORCE_FALLBACK=1 is set: nothing to build")
        return 0
    wanted = "cuda" if build.extension == "cuda" or _build.cuda_unbuildable(config) is None \
        else "cpu"
    if build.extension == wanted:
        return None  # nothing to do: the report follows
    status = _build.build_in_child()
    if status != 0:
        print(f"pyg_edgedot: the {_build.WHAT[wanted]} kernels did not build (the compiler's "
              "output is above)", file=sys.stderr)
        return status
    # This process registered the ops before the build: report from a fresh one.
    return subprocess.run([sys.executable, "-m", "pyg_edgedot"]).returncode


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m pyg_edgedot", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", action="store_true",
                        help="build the kernels now if they are not; on failure, print the "
                             "compiler's output and exit 1")
    args = parser.parse_args(argv)

    import torch
    import pyg_edgedot
    from pyg_edgedot import _backend, _build

    loaded = _backend.loaded()
    if args.build:
        status = _build_now(loaded, _build)
        if status is not None:
            return status
    build = loaded.build
    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    rows = [
        ("pyg_edgedot", f"{pyg_edgedot.__version__} ({os.path.dirname(pyg_edgedot.__file__)})"),
        ("torch", f"{torch.__version__} (CUDA {torch.version.cuda or 'none'})"),
        ("GPUs", ", ".join(gpus) if gpus else "none visible"),
        ("nvcc", _nvcc_version(_build.nvcc_path())),
        ("kernel sources", str(_build.find_csrc() or "not found")),
        ("extension", f"{build.extension or 'not built'}"
                      + (f" ({build.library_path}, {_ORIGINS[build.origin]})"
                         if build.library_path else "")),
        ("build cache", str(_build.cache_root())),
    ]
    if build.cuda_error:
        rows.append(("no CUDA kernel", build.cuda_error))
    if loaded.triton_error and build.extension != "cuda":
        rows.append(("no Triton path", loaded.triton_error))
    if build.cpu_error:
        rows.append(("no C++ kernel", build.cpu_error))
    if build.log_path:
        rows.append(("build log", f"{build.log_path} (`python -m pyg_edgedot --build` "
                                  "retries and prints it)"))
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

