"""Builds or loads the C++/CUDA extension (``csrc/``) once per process, and reads its schemas.

The extension is compiled just-in-time with ninja through ``torch.utils.cpp_extension.load``
into PyTorch's extension cache (``TORCH_EXTENSIONS_DIR`` is respected) the first time
``pyg_edgedot`` is imported on a machine, and loaded from the cache afterwards. Nothing is
compiled inside ``forward``. Which backend then serves each op is decided in
:mod:`pyg_edgedot._backend`, from the :class:`BuildResult` this module returns.
"""
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

import torch

from ._config import Config

NAMESPACE = "pyg_edgedot"
CSRC = Path(__file__).resolve().parent.parent / "csrc"


@dataclass(frozen=True)
class BuildResult:
    extension: Optional[str] = None      # "cuda", "cpu" or None (nothing loaded)
    library_path: Optional[str] = None
    cuda_error: Optional[str] = None     # why the CUDA kernels are not built, if they are not
    cpu_error: Optional[str] = None      # why the C++ kernels are not built, if they are not
    seconds: Optional[float] = None      # how long the build (or the cache load) took


def sources(with_cuda: bool) -> List[str]:
    """csrc/*.cpp hold the schemas, csrc/cpu and csrc/cuda the kernels of each backend."""
    files = sorted(CSRC.glob("*.cpp")) + sorted((CSRC / "cpu").glob("*.cpp"))
    if with_cuda:
        files += sorted((CSRC / "cuda").glob("*.cu"))
    return [str(f) for f in files]


_DEF = re.compile(r'm\.def\(\s*((?:"(?:[^"\\]|\\.)*"\s*)+)\)')
_LITERAL = re.compile(r'"((?:[^"\\]|\\.)*)"')


def schemas() -> Dict[str, Dict[str, str]]:
    """``{group: {op name: schema}}``, read from the ``m.def("...")`` calls of
    ``csrc/<group>.cpp``: the one place each schema is written. Used to define the ops from
    Python when nothing could be compiled, and by the tests against the loaded library."""
    out: Dict[str, Dict[str, str]] = {}
    for path in sorted(CSRC.glob("*.cpp")):
        group = out.setdefault(path.stem, {})
        for match in _DEF.finditer(path.read_text()):
            schema = "".join(_LITERAL.findall(match.group(1)))
            group[schema.split("(", 1)[0].strip()] = schema
    return out


def nvcc_path() -> Optional[str]:
    from torch.utils.cpp_extension import CUDA_HOME
    if CUDA_HOME is None:
        return None
    nvcc = Path(CUDA_HOME) / "bin" / "nvcc"
    return str(nvcc) if nvcc.exists() else None


def cuda_unbuildable(config: Config) -> Optional[str]:
    """None if the CUDA kernels can be built here, else the reason they cannot."""
    if not config.build_cuda:
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


def compile_extension(with_cuda: bool, verbose: bool = False) -> str:
    """Builds (or loads from the cache) and loads the library; returns its path."""
    from torch.utils import cpp_extension

    name = f"{NAMESPACE}_{'cuda' if with_cuda else 'cpu'}"
    build_dir = Path(cpp_extension._get_build_directory(name, verbose=False))
    built = build_dir / f"{name}.so"
    files = sources(with_cuda)
    if not built.exists() or any(Path(s).stat().st_mtime > built.stat().st_mtime
                                 for s in files):
        what = "C++ and CUDA" if with_cuda else "C++"
        eta = "1-3 minutes" if with_cuda else "about 30 seconds"
        print(f"pyg_edgedot: compiling the {what} kernels into {build_dir} "
              f"(once per machine; takes {eta})...", file=sys.stderr, flush=True)
    # -ffp-contract=off: the CPU forward's AVX2 and baseline loops give the same bits.
    kwargs = dict(name=name, sources=files, extra_cflags=["-O3", "-fopenmp", "-ffp-contract=off"],
                  extra_ldflags=["-fopenmp"], extra_include_paths=[str(CSRC)],
                  is_python_module=False, verbose=verbose)
    old_arch = os.environ.get("TORCH_CUDA_ARCH_LIST")
    if with_cuda:
        kwargs["extra_cuda_cflags"] = ["-O3", "-lineinfo"]
        os.environ["TORCH_CUDA_ARCH_LIST"] = _arch_list()
    try:
        cpp_extension.load(**kwargs)
    finally:
        if with_cuda:
            if old_arch is None:
                os.environ.pop("TORCH_CUDA_ARCH_LIST", None)
            else:
                os.environ["TORCH_CUDA_ARCH_LIST"] = old_arch
    return str(built)


def short_reason(err: BaseException) -> str:
    lines = [ln.strip() for ln in str(err).strip().splitlines() if ln.strip()]
    errors = [ln for ln in lines if "error" in ln.lower() and "build stopped" not in ln]
    return (errors[0] if errors else lines[-1] if lines else type(err).__name__)[:300]


def build(config: Config) -> BuildResult:
    """The CUDA extension where it can be built, else the CPU one, else nothing."""
    if config.force_fallback:
        reason = "PYG_EDGEDOT_FORCE_FALLBACK=1 is set"
        return BuildResult(cuda_error=reason, cpu_error=reason)
    if not CSRC.is_dir():
        reason = (f"the kernel sources were not found at {CSRC} (install from a source "
                  "checkout with `pip install -e .`)")
        return BuildResult(cuda_error=reason, cpu_error=reason)
    start = time.time()
    cuda_error = cuda_unbuildable(config)
    if cuda_error is None:
        try:
            path = compile_extension(with_cuda=True)
            return BuildResult("cuda", path, seconds=time.time() - start)
        except Exception as err:  # a failed nvcc build must not stop the CPU kernel
            cuda_error = f"building the CUDA kernel failed: {short_reason(err)}"
    try:
        path = compile_extension(with_cuda=False)
        return BuildResult("cpu", path, cuda_error=cuda_error, seconds=time.time() - start)
    except Exception as err:
        return BuildResult(cuda_error=cuda_error,
                           cpu_error=f"building the C++ kernel failed: {short_reason(err)}")
