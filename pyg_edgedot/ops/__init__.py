"""One module per op group: the public function, its checks, fake kernels, autograd and
pure-PyTorch fallback. ``NAME`` is the group's schema file, ``csrc/<NAME>.cpp``."""
from . import candidates, edge_dot, edge_dot_loss, edge_dot_rel, negative_sampling, topk

GROUPS = (edge_dot, edge_dot_rel, candidates, edge_dot_loss, negative_sampling, topk)
