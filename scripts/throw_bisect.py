"""Does a C++ exception with a formatted message reach Python from a JIT-built extension?

On the H200 image it did not (each variant segfaulted, 2026-12-02): run with
`TORCH_EXTENSIONS_DIR=/tmp/tb python3 scripts/throw_bisect.py`. This is why the kernels never
throw for bad indices and pyg_edgedot raises from Python."""
import os, subprocess, sys, textwrap
SRC = textwrap.dedent('''
#include <ATen/ATen.h>
#include <torch/library.h>
at::Tensor boom(const at::Tensor& x, int64_t kind) {
  if (kind == 0) TORCH_CHECK(false, "plain check ", x.sizes());
  if (kind == 1) TORCH_CHECK_INDEX(false, "index check");
  if (kind == 2) TORCH_CHECK_VALUE(false, "value check");
  return x;
}
TORCH_LIBRARY(NSNAME, m) { m.def("boom(Tensor x, int kind) -> Tensor"); }
TORCH_LIBRARY_IMPL(NSNAME, CPU, m) { m.impl("boom", &boom); }
''')
def child(variant):
    import torch
    from torch.utils.cpp_extension import load_inline
    ns = "tb_" + variant
    cflags = {"plain": ["-O2"], "omp": ["-O3", "-fopenmp"], "o3": ["-O3"]}[variant]
    ld = ["-fopenmp"] if variant == "omp" else []
    load_inline(name=ns, cpp_sources=[SRC.replace("NSNAME", ns)], extra_cflags=cflags,
                extra_ldflags=ld, is_python_module=False, verbose=False)
    op = getattr(torch.ops, ns).boom
    for kind in (0, 1, 2):
        try:
            op(torch.ones(2), kind)
        except Exception as e:
            print(variant, kind, type(e).__name__, str(e).splitlines()[0], flush=True)
if len(sys.argv) > 1:
    child(sys.argv[1]); sys.exit(0)
for v in ("plain", "o3", "omp"):
    r = subprocess.run([sys.executable, __file__, v], capture_output=True, text=True)
    print(v, "rc", r.returncode, r.stdout.strip()[-400:], r.stderr.strip()[-300:] if r.returncode else "")
