#!/usr/bin/env python3
"""Say what torch on this node sees, as one JSON line: its version, CUDA, NCCL and device count.

Run on the node by the facts role with the Python that runs the benchmarks (collbench_node.python);
a Python without torch fails (ImportError), which the facts role records as "no torch".
"""

import json

import torch

cuda = torch.cuda.is_available()
nccl = ".".join(map(str, torch.cuda.nccl.version())) if cuda else None
devices = torch.cuda.device_count() if cuda else 0
print(json.dumps({"torch": torch.__version__, "cuda": torch.version.cuda, "nccl": nccl, "devices": devices}))
