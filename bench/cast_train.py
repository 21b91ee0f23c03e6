"""CAST train-step throughput (issue: batch 512, d = 768, L = 5; float32 and bfloat16 compute), and the main job's
training loop as `vidjax.train.fit` runs it.

    python bench/cast_train.py [--batch 512] [--dim 768] [--context 5] [--steps 20]
    python bench/cast_train.py --loop [--loop-steps 400]     # configs/cast_coin.py's world and settings

`--loop`: CAST's training loop on configs/cast_coin.py's synthetic world (batch 512, its real CVR training set),
three ways: the feature vectors gathered on the host and shipped every step (`Gather` with a zero device budget:
what every loader did before), the tables on the device with row indices per step, and the same with
`--spc` steps per compiled call (a `lax.scan`). Columns: steps/s of the loop (after its first log interval, so
compiling is left out), the jitted step alone on a device-resident batch, device-busy = step time / loop time per
step, and the host's own ms and host-to-device bytes per step (`fit`'s log).

Times the real jitted train step of `vidjax.train` (CAST forward + type-aware loss + AdamW update;
parameters and optimizer state stay float32 in both modes) and reports examples/s, the achieved
FLOP/s (XLA's cost analysis of the compiled step) and its ratio to a large matmul in the same dtype measured in
the same run on the same device (`machine.peaks`: 2048^3 on CPU, 8192^3 on an accelerator). Prints a table with the machine it ran on.

Peer column: when `torch` is importable (never a vidjax dependency; `pip install torch` by hand for
this), the same Table-10 model, type-aware loss and AdamW are timed as a plain PyTorch eager step on
the same device in the same run (the GPU beside a GPU, with TF32 as vidjax's train default; the same cores on a
CPU), and the table gives vidjax's examples/s as a ratio of it.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import machine  # bench/machine.py

import jax
import jax.numpy as jnp
import numpy as np

from vidjax import losses, train
from vidjax.models import cast as cast_models


def cast_step(batch: int, dim: int, context: int = 5, dtype=jnp.float32):
  """(jitted donated step, fresh-state function, batch on the device): CAST's real train step
  (`vidjax.train.make_train_step`: Table-10 model, type-aware loss eq. 6-9, AdamW) on random unit vectors."""
  model = cast_models.CAST(dim, dtype=dtype)
  rng = np.random.default_rng(0)
  unit = lambda *s: (lambda x: x / np.linalg.norm(x, axis=-1, keepdims=True))(rng.normal(size=s)).astype(np.float32)  # noqa: E731
  data = {
      "text": unit(batch, dim), "history": unit(batch, context, dim), "history_mask": np.ones((batch, context), np.float32),
      "positive": unit(batch, dim), "state_negs": unit(batch, 3, dim), "state_mask": np.ones((batch, 3), np.float32),
      "ident_negs": unit(batch, 3, dim), "ident_mask": np.ones((batch, 3), np.float32),
  }

  def loss_fn(params, b, key):
    v_hat = model.apply({"params": params}, b["text"], b["history"], b["history_mask"], deterministic=False,
                        rngs={"dropout": key})
    return losses.cast_loss(v_hat, b["positive"], b["state_negs"], b["state_mask"], b["ident_negs"], b["ident_mask"])

  optimizer = train.adamw(1e-4, 1e-3)
  params = model.init(jax.random.PRNGKey(0), data["text"][:1], data["history"][:1], data["history_mask"][:1])["params"]

  def fresh():  # a new copy each time: the step donates (deletes) the state it is given
    own = jax.tree.map(jnp.array, params)
    return train.TrainState(step=jnp.zeros((), jnp.int32), params=own, opt_state=optimizer.init(own))
  return jax.jit(train.make_train_step(loss_fn, optimizer), donate_argnums=0), fresh, jax.device_put(data)


def bench_train_step(batch: int, dim: int, context: int, dtype, steps: int) -> dict:
  step_fn, fresh, batch_dev = cast_step(batch, dim, context, dtype)
  key = jax.random.PRNGKey(1)
  state, sec, flops = machine.time_train_step(step_fn, fresh(), batch_dev, key, steps)
  leaves = jax.tree_util.tree_leaves(state.params) + jax.tree_util.tree_leaves(state.opt_state)
  assert all(x.dtype != jnp.bfloat16 for x in leaves if hasattr(x, "dtype")), "params must stay float32"
  return {"step_ms": 1e3 * sec, "examples_per_s": batch / sec, "flops_per_step": flops, "flops_per_s": flops / sec}


def torch_device(torch) -> str | None:
  """The torch device of JAX's default device's kind: "cuda" beside a GPU, "cpu" beside a CPU, None (a TPU)."""
  platform = jax.devices()[0].platform
  if platform == "gpu":
    return "cuda" if torch.cuda.is_available() else None
  return "cpu" if platform == "cpu" else None


def bench_torch_step(batch: int, dim: int, context: int, steps: int) -> dict | None:
  """The same step in PyTorch eager (float32): CAST (Table 10) + eq. 6-9 + AdamW, on the device the vidjax rows ran
  on (`torch_device`). On a GPU its float32 matmuls are TF32, as vidjax's train step at its default precision
  (`precision.train="default"`), and the clock is read after a `torch.cuda.synchronize()`. None without torch or
  without a torch device beside JAX's."""
  try:
    import torch  # pylint: disable=g-import-not-at-top
    from torch import nn  # pylint: disable=g-import-not-at-top
  except ImportError:
    return None
  device = torch_device(torch)
  if device is None:
    return None
  if device == "cuda":
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
  sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
  torch.manual_seed(0)
  unit = lambda x: x / x.norm(dim=-1, keepdim=True).clamp_min(1e-6)  # noqa: E731

  class Cast(nn.Module):
    def __init__(self, d, heads=8):
      super().__init__()
      self.cond = nn.Sequential(nn.Linear(2 * d, 2 * d), nn.LayerNorm(2 * d), nn.ReLU(), nn.Dropout(0.1),
                                nn.Linear(2 * d, d))
      self.q_proj, self.h_proj = nn.Linear(d, d), nn.Linear(d, d)
      self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
      self.ln = nn.LayerNorm(d)
      self.fc1, self.fc2 = nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, text, history, mask):
      q, h = unit(text), unit(history) * mask[..., None]
      real = mask > 0
      v_prev = h[:, -1] * real[:, -1:]  # left-padded: the last slot is v_{t-1}
      delta_cond = self.cond(torch.cat([q, v_prev], -1))
      hp = self.h_proj(h)
      a, _ = self.attn(self.q_proj(q)[:, None], hp, hp, key_padding_mask=~real,
                       need_weights=False)
      a = a[:, 0] * real.any(1, keepdim=True)
      delta_ctx = a + self.fc2(torch.relu(self.fc1(self.ln(a))))
      return unit(v_prev + delta_cond + delta_ctx)

  def loss_fn(v_hat, pos, state, ident, tau=0.07):
    v, p, s, i = unit(v_hat), unit(pos), unit(state), unit(ident)
    logits = v @ p.T / tau
    l_batch = nn.functional.cross_entropy(logits, torch.arange(len(v), device=logits.device))
    pos_logit = (v * p).sum(-1, keepdim=True) / tau
    local = lambda negs: (torch.logsumexp(torch.cat([pos_logit, torch.einsum("bd,bkd->bk", v, negs) / tau], 1), 1)  # noqa: E731
                          - pos_logit[:, 0]).mean()
    return l_batch + 5.0 * local(s) + 1.0 * local(i)

  model = Cast(dim).to(device)
  opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=1e-3)
  g = torch.Generator().manual_seed(0)
  r = lambda *shape: unit(torch.randn(*shape, generator=g))  # noqa: E731
  data = tuple(x.to(device) for x in (r(batch, dim), r(batch, context, dim), torch.ones(batch, context),
                                      r(batch, dim), r(batch, 3, dim), r(batch, 3, dim)))

  def step():
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(model(*data[:3]), *data[3:])
    loss.backward()
    opt.step()
    return loss

  for _ in range(2):
    step()
  sync()
  start = time.perf_counter()
  for _ in range(steps):
    step()
  sync()
  sec = (time.perf_counter() - start) / steps
  return {"step_ms": 1e3 * sec, "examples_per_s": batch / sec, "version": torch.__version__,
          "threads": torch.get_num_threads(), "device": device}


def bench_loop(steps: int, spc: int) -> list[tuple[str, dict]]:
  """The CAST training loop of configs/cast_coin.py through `train.fit`, three ways (module docstring)."""
  import tempfile  # pylint: disable=g-import-not-at-top
  from pathlib import Path  # pylint: disable=g-import-not-at-top

  from vidjax.data import pipeline  # pylint: disable=g-import-not-at-top
  from vidjax.experiments.common import load_config, world_data  # pylint: disable=g-import-not-at-top
  from vidjax.methods import cast as cast_method  # pylint: disable=g-import-not-at-top
  from vidjax.worlds import procedural  # pylint: disable=g-import-not-at-top

  config = load_config(Path(__file__).resolve().parents[1] / "configs/cast_coin.py")
  tmp = Path(tempfile.mkdtemp(prefix="vidjax-bench-loop-"))
  _, clips, _, _, _, source = cast_method.setup(world_data(config, tmp / "data", procedural.write_world), tmp / "data")
  model = cast_method.build_models(config, clips.dim)["cast"]
  loss_fn = cast_method.make_loss_fn(model, config.train)
  example = source[0]
  dummy = [jnp.asarray(example[k])[None] for k in ("text", "history", "history_mask")]
  init_fn = lambda rng: model.init(rng, *dummy)["params"]  # noqa: E731
  optimizer = train.adamw(config.train.lr, config.train.weight_decay)
  bs, log_every = config.train.batch_size, max(steps // 4, 1)
  # The jitted step alone, on one batch already on the device.
  batch = jax.device_put(source.collate(np.arange(bs)))
  step_fn = jax.jit(train.make_train_step(loss_fn, optimizer), donate_argnums=0)

  def step_seconds():  # the jitted step alone (timed before and after the loops; the faster of the two)
    state = train.init_state(init_fn, optimizer, jax.random.PRNGKey(0))
    return machine.time_train_step(step_fn, state, batch, jax.random.PRNGKey(1), 50)[1]

  first = step_seconds()
  rows = []
  for label, budget, per_call in (("host gather (before)", 0, 1), ("device gather", None, 1),
                                  (f"device gather, {spc} steps/call", None, spc)):
    gather = pipeline.Gather(source.gather.tables, source.gather.fields, budget)
    dataset = pipeline.loader(pipeline.make_index_batches(len(source), bs, config.seed, gather.host(source.rows)))
    _, history = train.fit(init_fn=init_fn, loss_fn=loss_fn, optimizer=optimizer, dataset=dataset, num_steps=steps,
                           workdir=tmp / label.replace(" ", "_"), seed=0, log_every=log_every,
                           checkpoint_every=steps, progress=False, gather=gather, steps_per_call=per_call)
    later = history[1:] or history
    sps = float(np.mean([r["train/steps_per_sec"] for r in later]))
    rows.append((label, {"steps_per_s": sps, "loop_ms": 1e3 / sps,
                         "host_ms": float(np.mean([r["train/host_ms_per_step"] for r in later])),
                         "h2d_kb": float(np.mean([r["train/h2d_bytes_per_step"] for r in later])) / 1024}))
  step_s = min(first, step_seconds())
  for _, r in rows:
    r.update(step_ms=1e3 * step_s, busy=step_s * r["steps_per_s"])
  return rows


def main():
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--batch", type=int, default=512)
  ap.add_argument("--dim", type=int, default=768)
  ap.add_argument("--context", type=int, default=5)
  ap.add_argument("--steps", type=int, default=20)
  ap.add_argument("--loop", action="store_true", help="time the main job's training loop instead (see above)")
  ap.add_argument("--loop-steps", type=int, default=400)
  ap.add_argument("--spc", type=int, default=8, help="steps per compiled call of the loop's third row")
  args = ap.parse_args()
  if args.loop:
    print(f"machine: {machine.describe()}")
    print(f"CAST training loop, configs/cast_coin.py (SYNTHETIC procedural world), {args.loop_steps} steps")
    print(f"{'loop':<30}{'steps/s':>9}{'loop ms':>9}{'step ms':>9}{'busy':>7}{'host ms':>9}{'H2D KiB/step':>14}")
    for label, r in bench_loop(args.loop_steps, args.spc):
      print(f"{label:<30}{r['steps_per_s']:>9.1f}{r['loop_ms']:>9.2f}{r['step_ms']:>9.2f}{r['busy']:>7.0%}"
            f"{r['host_ms']:>9.2f}{r['h2d_kb']:>14.1f}")
    return
  peak = machine.peaks(("float32", "bfloat16"))
  print(f"machine: {machine.describe()}")
  print(machine.peaks_line(peak))
  print(f"CAST train step, batch {args.batch}, d {args.dim}, L {args.context}")
  print(f"{'compute':<10}{'step ms':>10}{'examples/s':>13}{'GFLOP/step':>12}{'GFLOP/s':>10}{'of matmul':>11}")
  rows = {}
  for name, dtype in (("float32", jnp.float32), ("bfloat16", jnp.bfloat16)):
    r = rows[name] = bench_train_step(args.batch, args.dim, args.context, dtype, args.steps)
    print(f"{name:<10}{r['step_ms']:>10.2f}{r['examples_per_s']:>13.0f}{r['flops_per_step'] / 1e9:>12.3f}"
          f"{r['flops_per_s'] / 1e9:>10.1f}{r['flops_per_s'] / peak[name]:>10.1%}")
  peer = bench_torch_step(args.batch, args.dim, args.context, args.steps)
  if peer is None:
    print("peer: torch is not importable (install it by hand, `pip install torch`, for the PyTorch column) or has "
          "no device beside JAX's")
    return
  where = ("on cuda, TF32 as vidjax's default" if peer["device"] == "cuda" else f"on cpu, {peer['threads']} threads")
  print(f"{'torch f32':<10}{peer['step_ms']:>10.2f}{peer['examples_per_s']:>13.0f}   (PyTorch {peer['version']} "
        f"eager {where}, same model, loss and AdamW)")
  print(f"vidjax float32 / PyTorch eager: {rows['float32']['examples_per_s'] / peer['examples_per_s']:.2f}x")


if __name__ == "__main__":
  main()
