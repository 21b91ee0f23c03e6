"""Device mesh, data-parallel and multi-host helpers shared by training and feature extraction.

vidjax scales out by data parallelism only (ARCHITECTURE.md, "Scale-out"): one 1-D mesh with axis
`'data'` over all devices; each batch is split along its leading dimension (`P('data')`) and
params / optimizer state are replicated (`P()`). Everything goes through `jax.jit` with explicit
in/out shardings; there is no `pmap`. The same code runs on one CPU, one multi-GPU host, or a
multi-host TPU pod slice / GPU cluster after `initialize_distributed()`:

  sharding.initialize_distributed()             # no-op on one host
  mesh = sharding.make_mesh()                   # ('data',) over every device of every process
  params = sharding.create_replicated(init_fn, mesh, rng)
  batch = sharding.shard_batch(local_batch, mesh)   # this process's rows -> one global array

Multi-host input: every process loads its own contiguous block of each global batch (see
`vidjax.data.pipeline`), and `shard_batch` assembles the per-process numpy arrays, in process order,
into one global `jax.Array` with `jax.make_array_from_process_local_data`.
"""
from __future__ import annotations

import logging
import os
from typing import Any, Callable, Mapping, Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

DATA_AXIS = "data"


def multihost_reason(env: Mapping[str, str] | None = None) -> str | None:
  """Says why the environment looks like a multi-process job, or None for a single host.

  Recognised: an explicit `JAX_COORDINATOR_ADDRESS`; a Cloud TPU pod slice (`TPU_WORKER_HOSTNAMES`
  or `TPU_PROCESS_ADDRESSES` naming more than one host, or `MEGASCALE_COORDINATOR_ADDRESS`); Slurm
  with more than one task; Open MPI with more than one rank. These are the environments
  `jax.distributed.initialize()` can configure itself from.
  """
  env = os.environ if env is None else env
  if env.get("JAX_COORDINATOR_ADDRESS"):
    return f"JAX_COORDINATOR_ADDRESS={env['JAX_COORDINATOR_ADDRESS']}"
  for key in ("TPU_PROCESS_ADDRESSES", "TPU_WORKER_HOSTNAMES"):
    hosts = [h for h in env.get(key, "").split(",") if h.strip()]
    if len(hosts) > 1:
      return f"{key} lists {len(hosts)} hosts"
  if env.get("MEGASCALE_COORDINATOR_ADDRESS"):
    return "MEGASCALE_COORDINATOR_ADDRESS is set (multislice TPU)"
  for key, what in (("SLURM_NTASKS", "Slurm tasks"), ("OMPI_COMM_WORLD_SIZE", "Open MPI ranks")):
    value = env.get(key, "")
    if value.isdigit() and int(value) > 1:
      return f"{key}={value} {what}"
  return None


def initialize_distributed(env: Mapping[str, str] | None = None) -> bool:
  """Calls `jax.distributed.initialize()` when the environment says multi-host.

  Must run before any other JAX call in the process (so: first thing in `main`). On a single host
  it does nothing, so notebooks and tests can call it unconditionally. Calling it twice is safe.

  Returns:
    True when the distributed runtime was initialized (now or before), False on a single host.
  """
  env = os.environ if env is None else env
  reason = multihost_reason(env)
  if reason is None:
    return False
  if jax.distributed.is_initialized():
    return True
  logging.info("Multi-host environment (%s): calling jax.distributed.initialize().", reason)
  # Cluster environments (TPU, Slurm, MPI) describe themselves; a plain local or hand-launched job
  # says its size and rank with JAX_NUM_PROCESSES / JAX_PROCESS_ID beside JAX_COORDINATOR_ADDRESS.
  explicit = {}
  if env.get("JAX_NUM_PROCESSES") or env.get("JAX_PROCESS_ID"):
    try:
      explicit = dict(coordinator_address=env["JAX_COORDINATOR_ADDRESS"],
                      num_processes=int(env["JAX_NUM_PROCESSES"]), process_id=int(env["JAX_PROCESS_ID"]))
    except (KeyError, ValueError) as e:
      raise ValueError("a hand-launched multi-process job needs JAX_COORDINATOR_ADDRESS=host:port, "
                       "JAX_NUM_PROCESSES=N and JAX_PROCESS_ID=0..N-1 (integers); got "
                       f"{ {k: env.get(k) for k in ('JAX_COORDINATOR_ADDRESS', 'JAX_NUM_PROCESSES', 'JAX_PROCESS_ID')} }"
                       ) from e
  jax.distributed.initialize(**explicit)
  logging.info("Process %d of %d; %d local / %d global devices.", jax.process_index(),
               jax.process_count(), jax.local_device_count(), jax.device_count())
  return True


def make_mesh(num_devices: int | None = None, devices: Sequence[jax.Device] | None = None) -> Mesh:
  """Builds the 1-D `('data',)` mesh.

  Args:
    num_devices: use only the first `num_devices` of `devices` (all when None). Meant for
      single-host tests and benchmarks; a multi-host job should use all devices so that every
      process owns part of the mesh.
    devices: the devices to choose from; `jax.devices()` (every device of every process) when None.

  Returns:
    A `Mesh` with one axis named `'data'`.
  """
  devices = list(jax.devices() if devices is None else devices)
  if num_devices is not None:
    if not 1 <= num_devices <= len(devices):
      raise ValueError(f"make_mesh: num_devices={num_devices} but {len(devices)} devices are "
                       f"available ({devices[0].platform}); expected 1..{len(devices)}.")
    devices = devices[:num_devices]
  return Mesh(np.asarray(devices), (DATA_AXIS,))


def replicated(mesh: Mesh) -> NamedSharding:
  """Sharding that keeps a full copy on every device of `mesh` (params, optimizer state, rng)."""
  return NamedSharding(mesh, P())


def data_sharded(mesh: Mesh, axis: int = 0) -> NamedSharding:
  """Sharding that splits the batch dimension (the leading one, or `axis`: 1 for a stack of batches) over
  `'data'`."""
  return NamedSharding(mesh, P(*([None] * axis), DATA_AXIS))


def process_batch_size(global_batch_size: int) -> int:
  """Rows of the global batch that this process loads: `global_batch_size / process_count`."""
  count = jax.process_count()
  if global_batch_size % count:
    raise ValueError(f"Global batch size {global_batch_size} is not divisible by the number of "
                     f"processes ({count}); every process must load the same number of rows.")
  return global_batch_size // count


def shard_batch(batch: Any, mesh: Mesh, axis: int = 0) -> Any:
  """Turns this process's rows of a batch into global arrays split over `'data'`.

  Args:
    batch: a pytree (usually a dict) of numpy arrays, each `[B_local, ...]` with the same `B_local`:
      this process's part of the global batch (the whole batch on one host).
    axis: the batch dimension: 0, or 1 for a stack of batches `[S, B_local, ...]` (`vidjax.train.fit`'s
      multi-step calls).

  Returns:
    The same pytree of `jax.Array`s, each `[B_local * process_count, ...]` (along `axis`), sharded on 'data'.
  """
  sharding = data_sharded(mesh, axis)
  num_shards = mesh.shape[DATA_AXIS]
  leaves, _ = jax.tree_util.tree_flatten_with_path(batch)
  sizes = {}
  for path, leaf in leaves:
    name = jax.tree_util.keystr(path) or "<batch>"
    shape = np.shape(leaf)
    if len(shape) <= axis:
      raise ValueError(f"Batch entry {name} is a scalar{f' per step (shape {shape})' if axis else ''}; every entry "
                       f"needs a batch dimension (axis {axis}) to be split over the 'data' mesh axis.")
    sizes[name] = shape[axis]
  if len(set(sizes.values())) > 1:
    raise ValueError(f"Batch entries disagree on the batch size (leading dimension): {sizes}.")
  if sizes:
    global_size = next(iter(sizes.values())) * jax.process_count()
    if global_size % num_shards:
      raise ValueError(
          f"Global batch size {global_size} is not divisible by the {num_shards} devices of the "
          f"'data' mesh axis; choose a batch size that is a multiple of {num_shards}.")
  return jax.tree.map(lambda x: jax.make_array_from_process_local_data(sharding, np.asarray(x)),
                      batch)


def create_replicated(init_fn: Callable[..., Any], mesh: Mesh, *args: Any) -> Any:
  """Runs `init_fn(*args)` under jit so its outputs are born replicated on every device of `mesh`.

  Creating params inside a jit with `out_shardings` (rather than on one device and copying) means
  no device ever holds an unsharded intermediate copy, and all processes get identical values.
  """
  return jax.jit(init_fn, out_shardings=replicated(mesh))(*args)


def abstract_replicated(tree: Any, mesh: Mesh) -> Any:
  """`jax.ShapeDtypeStruct`s with replicated shardings matching `tree` (for checkpoint restore)."""
  sharding = replicated(mesh)
  return jax.tree.map(lambda x: jax.ShapeDtypeStruct(np.shape(x), x.dtype, sharding=sharding), tree)


# ----------------------------------------------------------------------------------------------
# Files every process needs: process 0 writes, the others wait and read.


def is_writer() -> bool:
  """Whether this process writes shared files (process 0; the others wait at a `barrier`)."""
  return jax.process_index() == 0


def barrier(name: str) -> None:
  """Waits for every process (no-op on one host)."""
  if jax.process_count() > 1:
    from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
    multihost_utils.sync_global_devices(name)


def on_writer(name: str, write):
  """Files every process needs: process 0 runs `write()` (which writes them), then every process waits at the
  barrier `name`. Returns what `write` returned on process 0 and None elsewhere (where the caller reads the files:
  `on_writer(name, build) or read(...)`), so the process that built them goes on without a round trip."""
  value = write() if is_writer() else None
  barrier(name)
  return value
