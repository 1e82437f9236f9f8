"""Finds, loads or builds the C++/CUDA kernel library (``csrc/``), and reads its schemas.

Where the library comes from, first match wins, for the CUDA variant (CPU and CUDA kernels;
only with a CUDA build of torch) and then the CPU one:

1. **the package**: ``pip install .``, ``pip install git+...`` and wheels compile it at
   install time (``setup.py``) into ``pyg_edgedot/pyg_edgedot_<variant>.so``, next to a
   ``.json`` record of its build key. Used when that key still matches (same sources, torch,
   Python, and the arch list covers the GPUs present).
2. **the build cache**: ``$TORCH_EXTENSIONS_DIR/pyg_edgedot/<variant>-<key>/`` (default
   ``~/.cache/torch_extensions``), one folder per build key, so two checkouts or versions never
   build over each other. ``result.json`` there records the outcome of the one build of that
   key: the library, or the compiler's first error and the full log (``build.log``).
3. **a build now**, just in time (editable installs always take this path; a checkout's
   sources change): one line says so and how long it took. A failure is recorded and not
   retried by later imports until the sources, torch, the compiler or its environment change;
   ``python -m pyg_edgedot --build`` retries and prints the compiler's output.

Loading a library already built imports nothing from ``torch.utils.cpp_extension`` (which logs
at import); only a build does. ``setup.py`` loads this file on its own (no package imports),
so both paths compile with the same flags into the same cache.
"""
import contextlib
import hashlib
import io
import json
import logging
import os
import re
import shutil
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import torch

NAMESPACE = "pyg_edgedot"
PACKAGE_DIR = Path(__file__).resolve().parent
# Installed packages carry the sources in pyg_edgedot/csrc; a checkout keeps them at its top.
CSRC_CANDIDATES = (PACKAGE_DIR / "csrc", PACKAGE_DIR.parent / "csrc")
# -ffp-contract=off: the CPU forward's AVX2 and baseline loops give the same bits.
# (Tuples: torch's load() appends to the lists it is given.)
CFLAGS = ("-O3", "-fopenmp", "-ffp-contract=off")
LDFLAGS = ("-fopenmp",)
CUDA_CFLAGS = ("-O3", "-lineinfo")
BUILD_VERSION = 1  # bump when how the library is built changes (flags, layout)
WHAT = {"cuda": "C++ and CUDA", "cpu": "C++"}


@dataclass(frozen=True)
class BuildResult:
    extension: Optional[str] = None      # "cuda", "cpu" or None (nothing loaded)
    library_path: Optional[str] = None
    cuda_error: Optional[str] = None     # why the CUDA kernels are not built, if they are not
    cpu_error: Optional[str] = None      # why the C++ kernels are not built, if they are not
    seconds: Optional[float] = None      # how long the build (or the load) took
    origin: Optional[str] = None         # "package", "cache" or "built" (now)
    log_path: Optional[str] = None       # the log of the last failed build, if any


def find_csrc() -> Optional[Path]:
    for candidate in CSRC_CANDIDATES:
        if any(candidate.glob("*.cpp")):
            return candidate
    return None


CSRC = find_csrc() or CSRC_CANDIDATES[-1]


def sources(with_cuda: bool, csrc: Path = CSRC) -> List[str]:
    """csrc/*.cpp hold the schemas, csrc/cpu and csrc/cuda the kernels of each backend."""
    files = sorted(csrc.glob("*.cpp")) + sorted((csrc / "cpu").glob("*.cpp"))
    if with_cuda:
        files += sorted((csrc / "cuda").glob("*.cu"))
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


# ---- the toolchain ------------------------------------------------------------------------

def cuda_home() -> Optional[str]:
    """torch's rule (CUDA_HOME, CUDA_PATH, nvcc on the PATH, /usr/local/cuda), without
    importing torch.utils.cpp_extension, which logs a line at import on a machine without a
    GPU."""
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home is None:
        nvcc = shutil.which("nvcc")
        home = str(Path(nvcc).parent.parent) if nvcc else "/usr/local/cuda"
        if not os.path.exists(home):
            return None
    return home


def nvcc_path() -> Optional[str]:
    home = cuda_home()
    if home is None:
        return None
    nvcc = Path(home) / "bin" / "nvcc"
    return str(nvcc) if nvcc.exists() else None


def cuda_ruled_out(config) -> Optional[str]:
    """Why the CUDA variant is out whatever the toolchain (switched off, or a torch without
    CUDA), or None. :func:`build` asks only this before it looks for the package's CUDA
    library, which needs no toolchain."""
    if not config.build_cuda:
        return "PYG_EDGEDOT_CUDA=0 is set"
    if torch.version.cuda is None:
        return "this torch build has no CUDA (torch.version.cuda is None)"
    return None


def cuda_unbuildable(config) -> Optional[str]:
    """None if the CUDA kernels can be built here, else the reason they cannot."""
    ruled_out = cuda_ruled_out(config)
    if ruled_out is not None:
        return ruled_out
    if nvcc_path() is None:
        return ("nvcc was not found (set CUDA_HOME to a CUDA toolkit matching "
                f"torch.version.cuda={torch.version.cuda})")
    if not (Path(cuda_home()) / "include" / "cuda_runtime.h").exists():
        # A CUDA_HOME guessed from nvcc on the PATH (e.g. /usr/local) without the headers
        # would fail every build.
        return (f"CUDA_HOME={cuda_home()} has no include/cuda_runtime.h (set CUDA_HOME to the "
                "CUDA toolkit, e.g. /usr/local/cuda)")
    return None


def _gpu_arches() -> List[str]:
    if not torch.cuda.is_available():
        return []
    caps = sorted({torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())})
    return [f"{major}.{minor}" for major, minor in caps]


def wanted_arches() -> str:
    """TORCH_CUDA_ARCH_LIST, else the GPUs present; empty without either."""
    return os.environ.get("TORCH_CUDA_ARCH_LIST") or ";".join(_gpu_arches())


def arch_list() -> str:
    """:func:`wanted_arches`, else 9.0 (H100/H200: without a GPU the build still shows CUDA
    compile errors)."""
    return wanted_arches() or "9.0"


def gencode_flags(arches: str) -> List[str]:
    """nvcc's flags for an arch list such as ``8.0;9.0+PTX`` (torch's syntax and flags),
    passed explicitly so that the build never writes ``os.environ``."""
    flags = []
    for arch in re.split(r"[;\s,]+", arches.strip()):
        if not arch:
            continue
        number = arch.replace("+PTX", "").replace(".", "")
        flags.append(f"-gencode=arch=compute_{number},code=sm_{number}")
        if arch.endswith("+PTX"):
            flags.append(f"-gencode=arch=compute_{number},code=compute_{number}")
    return flags


def _arch_set(arches: str) -> set:
    return {a.replace("+PTX", "") for a in re.split(r"[;\s,]+", arches.strip()) if a}


def toolchain(variant: str) -> Dict[str, object]:
    """What a failed build depends on besides its key: the compilers, ninja and the variables
    they read. A recorded failure is retried when any of these change."""
    def identity(program: Optional[str]):
        path = shutil.which(program) if program else None
        if path is None:
            return None
        stat = os.stat(path)
        return [os.path.realpath(path), stat.st_size, int(stat.st_mtime)]
    out: Dict[str, object] = {
        "cxx": identity(os.environ.get("CXX", "c++")), "ninja": identity("ninja"),
        "env": {k: os.environ.get(k) for k in ("CXX", "CC", "CFLAGS", "CXXFLAGS", "LDFLAGS")}}
    if variant == "cuda":
        out["nvcc"] = identity(nvcc_path())
        out["cuda_home"] = cuda_home()
    return out


# ---- the build key and the cache ----------------------------------------------------------

def source_hash(csrc: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in csrc.rglob("*") if p.is_file() and p.suffix in
                       (".cpp", ".cu", ".h", ".cuh", ".hpp")):
        digest.update(path.relative_to(csrc).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def build_key(variant: str, csrc: Optional[Path]) -> Dict[str, object]:
    """Everything the built library depends on. Its hash names the cache folder."""
    key: Dict[str, object] = {
        "build": BUILD_VERSION, "variant": variant,
        "sources": source_hash(csrc) if csrc is not None else None,
        "torch": torch.__version__, "torch_git": torch.version.git_version,
        "torch_cuda": torch.version.cuda, "python": "%d.%d" % sys.version_info[:2],
        "cflags": list(CFLAGS), "ldflags": list(LDFLAGS)}
    if variant == "cuda":
        key["arch"] = arch_list()
        key["cuda_cflags"] = list(CUDA_CFLAGS)
    return key


def key_id(key: Dict[str, object]) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


def cache_root() -> Path:
    """PyTorch's extension cache (``TORCH_EXTENSIONS_DIR``, default
    ``~/.cache/torch_extensions``), in a ``pyg_edgedot`` folder of its own."""
    root = os.environ.get("TORCH_EXTENSIONS_DIR")
    if not root:
        root = os.path.join(os.environ.get("XDG_CACHE_HOME") or
                            os.path.join(os.path.expanduser("~"), ".cache"), "torch_extensions")
    return Path(root) / NAMESPACE


def library_name(variant: str) -> str:
    return f"{NAMESPACE}_{variant}"


def _read_json(path: Path) -> Optional[dict]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)


def short_reason(err) -> str:
    """The compiler's first error line from a build's output (or an exception's text), not
    the command line that ran it."""
    text = str(err)
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    noise = ("Error building extension", "FAILED:", "ninja: build stopped", "[")
    candidates = [ln for ln in lines if not ln.startswith(noise)]
    for pattern in (r"\b(fatal )?error\b\s*:", r"\bfatal\b\s*:", r"not found|No such file",
                    r"\berror\b"):
        hits = [ln for ln in candidates if re.search(pattern, ln, re.IGNORECASE)]
        if hits:
            return hits[0]
    return (candidates or lines or [type(err).__name__])[-1]


class _Capture(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines: List[str] = []

    def emit(self, record):
        self.lines.append(self.format(record))


def compile_library(variant: str, csrc: Path, build_dir: Path) -> Tuple[str, str]:
    """Compiles (ninja, through torch's public ``cpp_extension.load``) and loads the library
    of ``variant`` in ``build_dir``; returns its path and torch's log lines. Raises on failure,
    with the compiler's output in the message."""
    # torch's build logs (e.g. "No CUDA runtime is found", its compiler checks) go to the
    # build's log, not to the terminal: a logger in recent torch, warnings, and lines printed
    # to stderr in older torch (2.5 prints "No CUDA runtime is found" when the import runs).
    capture = _Capture()
    logger = logging.getLogger("torch.utils.cpp_extension")
    logger.addHandler(capture)
    propagate, logger.propagate = logger.propagate, False
    printed = io.StringIO()
    try:
        with warnings.catch_warnings(record=True) as caught, \
                contextlib.redirect_stderr(printed):
            warnings.simplefilter("always")
            from torch.utils import cpp_extension
            kwargs = dict(name=library_name(variant), sources=sources(variant == "cuda", csrc),
                          extra_cflags=list(CFLAGS), extra_ldflags=list(LDFLAGS),
                          extra_include_paths=[str(csrc)], build_directory=str(build_dir),
                          is_python_module=False, with_cuda=variant == "cuda", verbose=False)
            if variant == "cuda":
                kwargs["extra_cuda_cflags"] = list(CUDA_CFLAGS) + gencode_flags(arch_list())
            cpp_extension.load(**kwargs)
    finally:
        logger.removeHandler(capture)
        logger.propagate = propagate
    log = printed.getvalue().splitlines() + capture.lines + [str(w.message) for w in caught]
    return str(build_dir / f"{library_name(variant)}.so"), "\n".join(log)


def _say(message: str, end: str = "\n") -> None:
    print(f"pyg_edgedot: {message}", end=end, file=sys.stderr, flush=True)


def build_into_cache(variant: str, csrc: Path, force: bool = False,
                     show_log: bool = False) -> Tuple[Optional[str], Optional[str], str]:
    """The library of ``variant`` from the cache, or built into it now: ``(path, None, how)``,
    or ``(None, reason, log_path)`` if its build failed (now, or before with the same
    toolchain unless ``force``: then it is tried again)."""
    key = build_key(variant, csrc)
    entry = cache_root() / f"{variant}-{key_id(key)}"
    record = _read_json(entry / "result.json")
    tools = toolchain(variant)
    if record is not None and record.get("key") == key:
        if record.get("ok") and Path(record["library"]).is_file():
            return record["library"], None, "cache"
        if not record.get("ok") and record.get("toolchain") == tools and not force:
            return None, record["error"], record["log"]
    entry.mkdir(parents=True, exist_ok=True)
    _say(f"building the {WHAT[variant]} kernels in {entry} (once for these sources and this "
         f"torch; {'3-6 minutes' if variant == 'cuda' else '1-3 minutes'} on 2 cores)...",
         end=" ")
    start = time.time()
    try:
        library, log = compile_library(variant, csrc, entry)
    except Exception as err:  # noqa: BLE001  (any failure: record it, say it once, go on)
        seconds = time.time() - start
        log_path = entry / "build.log"
        log_path.write_text(str(err) + "\n")
        reason = f"building the {WHAT[variant]} kernels failed: {short_reason(err)}"
        print(f"failed after {seconds:.0f} s (log: {log_path})", file=sys.stderr, flush=True)
        if show_log:
            print(str(err), file=sys.stderr, flush=True)
        _write_json(entry / "result.json", {"ok": False, "key": key, "toolchain": tools,
                                            "error": reason, "log": str(log_path),
                                            "seconds": round(seconds, 1)})
        return None, reason, str(log_path)
    seconds = time.time() - start
    print(f"done in {seconds:.0f} s", file=sys.stderr, flush=True)
    (entry / "build.log").write_text(log + "\n")
    _write_json(entry / "result.json", {"ok": True, "key": key, "library": library,
                                        "seconds": round(seconds, 1)})
    return library, None, "built"


# ---- the library shipped in the package ---------------------------------------------------

def packaged(variant: str, csrc: Optional[Path]) -> Optional[str]:
    """The library compiled into the package at install time, if it fits this process."""
    library = PACKAGE_DIR / f"{library_name(variant)}.so"
    record = _read_json(PACKAGE_DIR / f"{library_name(variant)}.json")
    if record is None or not library.is_file():
        return None
    # The sources are compared where they were installed with it (an editable checkout's
    # change); the arch list is checked against the GPUs present, below.
    ignored = {"arch"} | ({"sources"} if csrc is None else set())
    key = build_key(variant, csrc)
    if any(key.get(k) != record.get(k) for k in set(key) | set(record) if k not in ignored):
        return None
    if variant == "cuda":
        if not _arch_set(wanted_arches()) <= _arch_set(record.get("arch", "")):
            return None
    return str(library)


def prebuild(package_dir: Path, csrc: Path, config) -> Optional[str]:
    """For ``setup.py``: compile the CUDA variant (where torch is a CUDA build and nvcc is
    found) or else the CPU one through the cache, and copy it into ``package_dir`` with its
    key. Returns the variant, or None if nothing could be built (the install still
    succeeds; the first import then tries again, just in time)."""
    no_cuda = cuda_unbuildable(config)
    if no_cuda is not None:
        _say(f"compiling the CPU kernel only: {no_cuda}")
    for variant in (["cuda"] if no_cuda is None else []) + ["cpu"]:
        library, reason, _ = build_into_cache(variant, csrc, force=True, show_log=True)
        if library is None:
            _say(f"{reason}; the package will build it at first import instead")
            continue
        shutil.copyfile(library, package_dir / f"{library_name(variant)}.so")
        _write_json(package_dir / f"{library_name(variant)}.json", build_key(variant, csrc))
        return variant
    return None


# ---- what an import does ------------------------------------------------------------------

def build(config, force: bool = False, show_log: bool = False) -> BuildResult:
    """The CUDA variant where torch is a CUDA build, else the CPU one, else nothing: from the
    package, the cache, or built now (see the module's docstring); loaded into torch."""
    if config.force_fallback:
        reason = "PYG_EDGEDOT_FORCE_FALLBACK=1 is set"
        return BuildResult(cuda_error=reason, cpu_error=reason)
    start = time.time()
    csrc = find_csrc()
    cuda_error = cuda_ruled_out(config)
    errors = {"cuda": cuda_error, "cpu": None}
    log_path = None
    for variant in (["cuda"] if cuda_error is None else []) + ["cpu"]:
        library, origin = (packaged(variant, csrc), "package") if not force else (None, None)
        if library is None:
            if csrc is None:
                errors[variant] = ("the kernel sources were not found (looked in "
                                   f"{' and '.join(map(str, CSRC_CANDIDATES))}); reinstall "
                                   "pyg_edgedot")
                continue
            unbuildable = cuda_unbuildable(config) if variant == "cuda" else None
            if unbuildable is not None:
                errors[variant] = (f"{unbuildable}, and the package holds no CUDA kernel "
                                   "built for this torch and these GPUs")
                continue
            library, errors[variant], origin = build_into_cache(variant, csrc, force, show_log)
            if library is None:
                log_path = origin
                continue
        try:
            torch.ops.load_library(library)
        except Exception as err:  # noqa: BLE001  (e.g. a library built for another torch)
            errors[variant] = f"loading {library} failed: {short_reason(err)}"
            continue
        return BuildResult(variant, library, cuda_error=errors["cuda"],
                           seconds=time.time() - start, origin=origin, log_path=log_path)
    return BuildResult(cuda_error=errors["cuda"], cpu_error=errors["cpu"], log_path=log_path)


def load_standalone(name: str):
    """Loads ``pyg_edgedot/<name>.py`` without importing the package (whose import loads the
    kernels): for this file run as a script, by :func:`build_in_child`. ``setup.py`` and the
    build backend load modules with ``build_backend/``'s loader of the same form instead:
    they run where torch, which this module imports, may be missing, and that folder is not
    installed."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(f"_pyg_edgedot_{name}",
                                                  Path(__file__).with_name(f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def build_in_child() -> int:
    """``python -m pyg_edgedot --build``: build again (retrying a recorded failure) in a fresh
    interpreter, since a build loads what it builds and this process has registered the ops
    already. The compiler's output is printed on failure; returns the exit status."""
    import subprocess
    code = "import runpy, sys; runpy.run_path(sys.argv[1], run_name='__main__')"
    return subprocess.run([sys.executable, "-c", code, __file__]).returncode


if __name__ == "__main__":
    _config = load_standalone("_config").Config.from_env()
    wanted = "cuda" if cuda_unbuildable(_config) is None else "cpu"
    _result = build(_config, force=True, show_log=True)
    sys.exit(0 if _result.extension == wanted else 1)
