"""Writes tests/golden/torch_save.pt and its expected arrays (tests/golden/torch_save.npz): the torch.save zip
format that `vidjax.convert.state_dict` reads without torch (tests/test_convert.py).

Not run by CI (it needs torch, installed by hand): `python bench/goldens/torch_files.py --out tests/golden`.
The checkpoint holds what released checkpoints hold: a wrapper dict ({"state_dict": ..., "epoch": ..., "args": an
argparse.Namespace}), DataParallel's `module.` prefix, float32 / float16 / bfloat16 / int64 / bool tensors, a
transposed (non-contiguous) view, two tensors sharing one storage at different offsets, nn.Parameters and a
0-d tensor.
"""
import argparse
import json
from pathlib import Path

import numpy as np
import torch


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--out", default="tests/golden")
  out = Path(parser.parse_args().out)
  g = torch.Generator().manual_seed(0)
  base = torch.randn(6, 5, generator=g)
  tensors = {
      "layer.weight": torch.nn.Parameter(torch.randn(4, 3, generator=g)),
      "layer.bias": torch.nn.Parameter(torch.randn(4, generator=g)),
      "half": torch.randn(3, 2, generator=g).half(),
      "bf16": torch.randn(2, 3, generator=g).bfloat16(),
      "steps": torch.arange(5, dtype=torch.int64),
      "mask": torch.tensor([True, False, True]),
      "transposed": base.t(),            # non-contiguous view of `base`'s storage
      "rows_2_to_4": base[2:4],          # the same storage at an offset
      "scalar": torch.tensor(1.5),
  }
  ckpt = {"state_dict": {f"module.{k}": v for k, v in tensors.items()}, "epoch": 3,
          "args": argparse.Namespace(lr=1e-4, name="x")}
  torch.save(ckpt, out / "torch_save.pt")
  expected = {k: (v.detach().float() if v.dtype == torch.bfloat16 else v.detach()).numpy() for k, v in tensors.items()}
  meta = {"generator": "bench/goldens/torch_files.py", "torch": torch.__version__, "seed": 0}
  np.savez(out / "torch_save.npz", meta=np.array(json.dumps(meta)), **{f"expected/{k}": v for k, v in expected.items()})
  print("wrote", out / "torch_save.pt", out / "torch_save.npz")


if __name__ == "__main__":
  main()
