"""Builds or loads the extension once, then registers fake kernels and autograd.

The extension (``csrc/``) is compiled just-in-time with ninja through
``torch.utils.cpp_extension.load`` into PyTorch's extension cache (``TORCH_EXTENSIONS_DIR``
is respected) the first time ``pyg_edgedot`` is imported on a machine, and loaded from the
cache afterwards. Nothing is compiled inside ``forward``.

Backends, per device:

* CPU: the fused C++ kernel (``csrc/cpu``), else the pure-PyTorch fallback.
* CUDA: the fused CUDA kernel (``csrc/cuda``), built when torch has CUDA and ``nvcc`` is
  found; else the Triton kernels (:mod:`pyg_edgedot._triton`; Triton ships with CUDA builds
  of torch) for ``edge_dot`` and its gradient, and the pure-PyTorch fallback for the rest.

When the extension cannot be built at all, the same op schemas are defined from Python
and implemented by :mod:`pyg_edgedot._reference`, so the public API, autograd and
``torch.compile`` behave the same way; one warning says why and how to fix it.

Environment variables:

* ``PYG_EDGEDOT_FORCE_FALLBACK=1``: do not build, no Triton; use the pure-PyTorch fallback.
* ``PYG_EDGEDOT_CUDA=0``: build the CPU kernel only, even where CUDA could be built (CUDA
  tensors then take the Triton path).
* ``PYG_EDGEDOT_TRITON=0``: never use the Triton kernels.
* ``TORCH_CUDA_ARCH_LIST``: the CUDA targets (default: the GPUs present, else ``9.0``).
"""
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Dict, List, Optional

import torch



NAMESPACE = "pyg_edgedot"
CSRC = Path(__file__).resolve().parent.parent / "csrc"

# What was built, and why something was not; filled by ``load()``.
STATE: Dict[str, Optional[str]] = {
    "extension": None,        # "cuda", "cpu" or None
    "cuda_error": None,       # why the CUDA kernel is not used, if it is not
    "cpu_error": None,        # why the C++ kernel is not used, if it is not
    "library_path": None,
    "triton_error": None,     # why the Triton kernels do not serve CUDA tensors, if they don't
}
_LIBRARIES: List[torch.library.Library] = []


def _sources(with_cuda: bool) -> List[str]:
    # csrc/*.cpp hold the schemas (TORCH_LIBRARY / TORCH_LIBRARY_FRAGMENT), csrc/cpu and
    # csrc/cuda the kernels of each backend.
    files = sorted(CSRC.glob("*.cpp")) + sorted((CSRC / "cpu").glob("*.cpp"))
    if with_cuda:
        files += sorted((CSRC / "cuda").glob("*.cu"))
    return [str(f) for f in files]


# The ops of pyg_edgedot come in groups, one module each. A group module defines
#   SCHEMAS:  {op name: schema}, the same as its csrc/*.cpp, for when nothing was compiled;
#   FALLBACK: {op name: pure-PyTorch implementation}, used on a device without a kernel;
#   register_python_side(): its fake kernels and autograd.
# Optional: triton_impls() -> {op name: Triton implementation}, for CUDA tensors when the CUDA
# extension is not built.
def _groups() -> list:
    from . import _candidates, _core, _relation
    return [_core, _candidates, _relation]


def nvcc_path() -> Optional[str]:
    from torch.utils.cpp_extension import CUDA_HOME
    if CUDA_HOME is None:
        return None
    nvcc = Path(CUDA_HOME) / "bin" / "nvcc"
    return str(nvcc) if nvcc.exists() else None


def cuda_buildable() -> Optional[str]:
    """None if the CUDA kernel can be built here, else the reason it cannot."""
    if os.environ.get("PYG_EDGEDOT_CUDA", "1") == "0":
        return "PYG_EDGEDOT_CUDA=0 is set"
    if torch.version.cuda is None:
        return "this torch build has no CUDA (torch.version.cuda is None)"
    if nvcc_path() is None:
        return ("nvcc was not found (set CUDA_HOME to a CUDA toolkit matching "
                f"torch.version.cuda={torch.version.cuda})")
    from torch.utils.cpp_extension import CUDA_HOME
    if not (Path(CUDA_HOME) / "include" / "cuda_runtime.h").exists():
        # torch guesses CUDA_HOME from nvcc on the PATH (e.g. /usr/local); a guess without the
        # headers would fail every build attempt, at every import.
        return (f"CUDA_HOME={CUDA_HOME} has no include/cuda_runtime.h (set CUDA_HOME to the "
                "CUDA toolkit, e.g. /usr/local/cuda)")
    return None


def _arch_list() -> str:
    if os.environ.get("TORCH_CUDA_ARCH_LIST"):
        return os.environ["TORCH_CUDA_ARCH_LIST"]
    if torch.cuda.is_available():
        caps = sorted({torch.cuda.get_device_capability(i)
                       for i in range(torch.cuda.device_count())})
        return ";".join(f"{major}.{minor}" for major, minor in caps)
    return "9.0"  # no GPU here: compile for the H100/H200 so compile errors still show


def _build(with_cuda: bool, verbose: bool = False) -> str:
    from torch.utils import cpp_extension

    name = f"{NAMESPACE}_{'cuda' if with_cuda else 'cpu'}"
    build_dir = Path(cpp_extension._get_build_directory(name, verbose=False))
    built = build_dir / f"{name}.so"
    sources = _sources(with_cuda)
    if not built.exists() or any(Path(s).stat().st_mtime > built.stat().st_mtime
                                 for s in sources):
        what = "C++ and CUDA" if with_cuda else "C++"
        eta = "1-3 minutes" if with_cuda else "about 30 seconds"
        print(f"pyg_edgedot: compiling the {what} kernels into {build_dir} "
              f"(once per machine; takes {eta})...", file=sys.stderr, flush=True)
    cflags = ["-O3", "-fopenmp", "-ffp-contract=off"]  # csrc/cpu/edge_dot_cpu.cpp: same bits
    kwargs = dict(name=name, sources=sources, extra_cflags=cflags,
                  extra_ldflags=["-fopenmp"], extra_include_paths=[str(CSRC)],
                  is_python_module=False, verbose=verbose)
    old_arch = os.environ.get("TORCH_CUDA_ARCH_LIST")
    if with_cuda:
        kwargs["extra_cuda_cflags"] = ["-O3", "-lineinfo"]
        os.environ["TORCH_CUDA_ARCH_LIST"] = _arch_list()
    start = time.time()
    try:
        cpp_extension.load(**kwargs)
    finally:
        if with_cuda:
            if old_arch is None:
                os.environ.pop("TORCH_CUDA_ARCH_LIST", None)
            else:
                os.environ["TORCH_CUDA_ARCH_LIST"] = old_arch
    STATE["build_seconds"] = f"{time.time() - start:.1f}"
    return str(built)


def _short(err: BaseException) -> str:
    lines = [ln.strip() for ln in str(err).strip().splitlines() if ln.strip()]
    errors = [ln for ln in lines if "error" in ln.lower() and "build stopped" not in ln]
    return (errors[0] if errors else lines[-1] if lines else type(err).__name__)[:300]


def load() -> None:
    """Build or load the extension (once per process), then register Python-side pieces."""
    if STATE["extension"] is not None or _LIBRARIES:
        return
    if os.environ.get("PYG_EDGEDOT_FORCE_FALLBACK", "0") == "1":
        STATE["cpu_error"] = STATE["cuda_error"] = "PYG_EDGEDOT_FORCE_FALLBACK=1 is set"
    elif not CSRC.is_dir():
        STATE["cpu_error"] = STATE["cuda_error"] = (
            f"the kernel sources were not found at {CSRC} (install from a source checkout "
            "with `pip install -e .`)")
    else:
        reason = cuda_buildable()
        if reason is None:
            try:
                STATE["library_path"] = _build(with_cuda=True)
                STATE["extension"] = "cuda"
            except Exception as err:  # a failed nvcc build must not stop the CPU kernel
                reason = f"building the CUDA kernel failed: {_short(err)}"
        STATE["cuda_error"] = reason
        if STATE["extension"] is None:
            try:
                STATE["library_path"] = _build(with_cuda=False)
                STATE["extension"] = "cpu"
            except Exception as err:
                STATE["cpu_error"] = f"building the C++ kernel failed: {_short(err)}"

    if STATE["extension"] != "cuda":
        STATE["triton_error"] = _triton_unusable()
    if STATE["extension"] is None:
        _define_fallback_schemas()
        _register_fallback("CPU")
        _register_cuda_without_extension()
        warnings.warn(
            f"pyg_edgedot: using the slower pure-PyTorch fallback because {STATE['cpu_error']}. "
            "To fix it, install a C++ compiler and ninja (`pip install ninja`), then run "
            "`python -m pyg_edgedot --build` to see the full build log.", stacklevel=3)
    elif STATE["extension"] != "cuda":
        _register_cuda_without_extension()
        if torch.cuda.is_available() and STATE["triton_error"] is not None:
            warnings.warn(
                f"pyg_edgedot: CUDA tensors use the slower pure-PyTorch fallback because "
                f"{STATE['cuda_error']} and the Triton path is unusable "
                f"({STATE['triton_error']}). To fix it, install the CUDA toolkit matching "
                f"torch.version.cuda={torch.version.cuda}, set CUDA_HOME, and run "
                "`python -m pyg_edgedot --build`.", stacklevel=3)
    _register_python_side()


def _triton_unusable() -> Optional[str]:
    """None if the Triton kernels can serve CUDA tensors here, else why not."""
    if os.environ.get("PYG_EDGEDOT_FORCE_FALLBACK", "0") == "1":
        return "PYG_EDGEDOT_FORCE_FALLBACK=1 is set"
    try:
        from . import _triton
    except Exception as err:  # noqa: BLE001  (a broken triton install: say so, go on)
        return f"importing the Triton kernels failed: {_short(err)}"
    return _triton.available()  # also honours PYG_EDGEDOT_TRITON=0


def _register_cuda_without_extension() -> None:
    """CUDA tensors without the CUDA extension: the Triton kernels where a group has them
    (and Triton works here), the pure-PyTorch fallback for everything else."""
    lib = torch.library.Library(NAMESPACE, "IMPL")
    use_triton = STATE.get("triton_error") is None
    for group in _groups():
        has_triton = use_triton and hasattr(group, "triton_impls")
        triton_impls = group.triton_impls() if has_triton else {}
        for name, impl in group.FALLBACK.items():
            lib.impl(name, triton_impls.get(name, impl), "CUDA")
    _LIBRARIES.append(lib)


def _define_fallback_schemas() -> None:
    # The same schemas as csrc/*.cpp, for when those files could not be compiled.
    lib = torch.library.Library(NAMESPACE, "DEF")
    for group in _groups():
        for schema in group.SCHEMAS.values():
            lib.define(schema)
    _LIBRARIES.append(lib)


def _register_fallback(dispatch_key: str) -> None:
    lib = torch.library.Library(NAMESPACE, "IMPL")
    for group in _groups():
        for name, impl in group.FALLBACK.items():
            lib.impl(name, impl, dispatch_key)
    _LIBRARIES.append(lib)


def _register_python_side() -> None:
    for group in _groups():
        group.register_python_side()


def backends() -> Dict[str, str]:
    """Which implementation each device type uses for ``edge_dot``: ``cuda``, ``triton``,
    ``cpp`` or ``python``."""
    ext = STATE["extension"]
    if ext == "cuda":
        cuda = "cuda"
    elif STATE.get("triton_error") is None:
        cuda = "triton"
    else:
        cuda = "python"
    return {"cpu": "cpp" if ext in ("cpu", "cuda") else "python", "cuda": cuda}
