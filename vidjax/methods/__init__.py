"""The methods vidjax implements, in one table: `METHODS`, name (a run's `config.experiment`) -> `Method`.

Everything that goes over "every method" reads this table and keeps no list of its own: `vidjax.main` dispatches a
method's run through it, `evaluate_all` trains and loads finished runs through it (its default `runs` are the
smoke configs), `vidjax.real_path` checks each method's lines of the real path, and the tests' fixtures and
`tests/test_layout.py` take the names from it. Adding a method is one entry here plus its own files (its experiment
module with `run`, its `suite`, its configs).

The table holds module paths, resolved on first use (`Method.run`, `Method.suite`): importing it imports no
method's code (it is light, no jax), so `vidjax.search`, `vidjax.real_path` and the configs may read it.
Experiments that are not a method (prepare, extract_videoprism, backbone, retrieval, stack, evaluate_all) are
`vidjax.main`'s plain dispatch.
"""
from __future__ import annotations

import dataclasses
import importlib
from typing import Callable


@dataclasses.dataclass(frozen=True)
class Line:
  """One line of the real path's summary (`vidjax.real_path`): in the run folder `folder` under `OUT/runs/`,
  results' `value` (a dotted key) must be >= (`strict`: >) `factor` x `reference` + `offset` (`reference` "": the
  constant `offset`)."""
  dataset: str
  folder: str
  claim: str
  value: str
  reference: str
  factor: float = 1.0
  offset: float = 0.0
  strict: bool = False


@dataclasses.dataclass(frozen=True)
class Method:
  """One method: `name` is its configs' `experiment`, `label` how summaries name it; `smoke` its smoke config
  (relative to the repository root: `evaluate_all`'s default runs, the tests' smoke runs); `real_path` its lines of
  the real path's summary. `experiment` / `suite_module`: the modules with `run(config, workdir)` and
  `suite(config, workdir) -> ([evaluate.Model], [evaluate.Benchmark])` (default: `vidjax.experiments.<name>` and
  `vidjax.methods.<name>`)."""
  name: str
  label: str
  smoke: str
  real_path: tuple[Line, ...] = ()
  experiment: str = ""
  suite_module: str = ""

  @property
  def experiment_module(self) -> str:
    return self.experiment or f"vidjax.experiments.{self.name}"

  @property
  def suite_path(self) -> str:
    return self.suite_module or f"vidjax.methods.{self.name}"

  @property
  def run(self) -> Callable:
    """`run(config, workdir) -> results` of the method's experiment (imported on first use)."""
    return importlib.import_module(self.experiment_module).run

  @property
  def suite(self) -> Callable:
    """`suite(config, workdir)` of a finished run: its models and benchmarks (imported on first use)."""
    return importlib.import_module(self.suite_path).suite


def _cast_line(dataset: str) -> Line:
  return Line(dataset, f"cast_{dataset}", "CAST Acc >= zero-shot Acc + 10", "metrics.cast.acc",
              "metrics.zero_shot.acc", offset=10.0)


# The table. Its order is the order of every listing made from it (evaluate_all's runs and table, the summary).
METHODS: dict[str, Method] = {m.name: m for m in (
    Method("cast", "cast", "configs/cast_coin.py:smoke",
           tuple(_cast_line(d) for d in ("youcook2", "coin", "crosstask"))),
    Method("comp", "videocomp", "configs/comp_activitynet.py:smoke", (
        Line("activitynet", "comp_activitynet", "contrastive fine-tune > zero-shot on temp-reorder",
             "metrics.contrastive.temp_reorder", "metrics.zero_shot.temp_reorder", strict=True),)),
    Method("genstate", "genstate", "configs/genstate_rendered.py:smoke", (
        Line("genstate", "genstate", "trained VidCLIP Acc_tri > the backbone's zero-shot Acc_tri (same triplets)",
             "metrics.vidclip.acc_tri", "metrics.zero_shot.acc_tri", strict=True),)),
    # The ordered-event queries (`vidjax.worlds.release.make_ordered`: each clip's hard negative is the same events
    # in another order, which stage-1 pooling cannot tell apart).
    Method("vedje", "vedje", "configs/vedje_msrvtt.py:smoke", (
        Line("msrvtt order queries", "vedje_msrvtt_order", "VEDJE T2V R@1 >= stage 1 T2V R@1 + 3",
             "metrics.vedje.t2v_r1", "metrics.stage1.t2v_r1", offset=3.0),
        Line("msrvtt order queries (joint pass)", "vedje_msrvtt_order",
             "VEDJE's joint pass alone T2V R@1 > chance (a random order of the same candidates)",
             "prior_split.joint_alone.t2v_r1", "prior_split_chance.t2v_r1", strict=True))),
    # The facet queries (one step of its video each: GRDR's premise, queries that name different facets of a video).
    Method("grdr", "grdr", "configs/grdr_msrvtt.py:smoke", (
        Line("msrvtt facet queries", "grdr_msrvtt_facets",
             "GRDR (<= 150 candidates) + X-Pool T2V R@1 >= X-Pool alone - 2 (inductive)",
             "metrics.inductive.grdr_cap150.t2v_r1", "metrics.inductive.xpool.t2v_r1", offset=-2.0),
        Line("msrvtt facet queries (recall)", "grdr_msrvtt_facets",
             "GRDR candidate recall >= 80 at <= 150 candidates (inductive)",
             "metrics.inductive.grdr_cap150.candidate_recall", "", offset=80.0))),
    Method("dense", "Dense baselines (CLIP4Clip, X-Pool)", "configs/dense_msrvtt.py:smoke", (
        Line("msrvtt", "dense_msrvtt", "X-Pool T2V R@1 >= the backbone cosine's T2V R@1", "metrics.xpool.t2v_r1",
             "metrics.backbone.t2v_r1"),
        # The facet queries (`vidjax.worlds.release.facet_queries`: one step of its video each): X-Pool's
        # text-conditioned frame pooling against the frame mean, and the mean against the whole-video cosine.
        Line("msrvtt facet queries", "dense_msrvtt_facets", "X-Pool T2V R@1 > CLIP4Clip meanP T2V R@1",
             "metrics.xpool.t2v_r1", "metrics.clip4clip_meanp.t2v_r1", strict=True),
        Line("msrvtt facet queries (meanP)", "dense_msrvtt_facets",
             "CLIP4Clip meanP T2V R@1 >= the backbone cosine's T2V R@1", "metrics.clip4clip_meanp.t2v_r1",
             "metrics.backbone.t2v_r1"))),
)}

