"""VideoComp end to end on the smoke world (written as files, read as a user's): the results.json contract, the
benchmark files, resume, config errors."""
import json
from pathlib import Path

import numpy as np
import pytest

from vidjax.data import comp
from vidjax.defaults.common import with_values
from vidjax.experiments import comp as E
from vidjax.experiments import common
from vidjax.experiments.common import load_config
from vidjax.methods import comp as M
from vidjax.methods.comp import METHODS, METRICS
from vidjax.methods.vidclip import TextTable, vidclip_setup

pytestmark = pytest.mark.highest_precision  # compares with NumPy or a reference (tests/conftest.py)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def smoke_run(smoke_runs):
  return smoke_runs("comp")


def test_smoke_run_writes_the_results_contract(smoke_run):
  workdir, results = smoke_run
  on_disk = json.loads((workdir / "results.json").read_text())
  assert on_disk["synthetic"] is True and "SYNTHETIC" in on_disk["note"]
  assert set(on_disk["metrics"]) == set(METHODS) >= {"contrastive", "negclip", "comploss", "negclip_pref",
                                                     "comppretrain_comploss", "comppretrain_negclip_pref"}
  for method, row in on_disk["metrics"].items():
    assert set(row) == set(METRICS), method
  assert set(on_disk["tables"]) == {"pretraining_ablation", "zero_shot_retrieval"}
  assert on_disk["counts"]["eval"] == {t: 16 for t in comp.EVAL_TYPES}
  # The benchmark the models were evaluated on is written in the release format and reads back; the evaluation's
  # multi triplets (the hierarchy score's top level) have their own file.
  triplets = comp.read_release(workdir / "benchmark" / "comp_activitynet_eval.json")
  assert {t.type for t in triplets} == set(comp.EVAL_TYPES)
  multi = comp.read_release(workdir / "benchmark" / "comp_activitynet_eval_multi.json")
  assert multi and {t.type for t in multi} == {"multi"}
  train = comp.read_release(workdir / "benchmark" / "comp_activitynet_train.json")
  assert "multi" in {t.type for t in train}
  for name in ("base", "comppretrain", *(m for m in METHODS if m != "zero_shot")):
    assert (workdir / "models" / name / "metrics.jsonl").exists(), name
  # Which reading of eq. 2's order trained the models, and the pairs of negatives each hinged.
  assert on_disk["comploss_reading"] == on_disk["comppretrain_reading"] == "paper"
  assert ["temp_reorder", "action_replace"] in on_disk["eq2_pairs"]["finetune"]
  assert on_disk["eq2_pairs"]["pretrain"] == [["reorder", "partial"]]


def test_the_reported_metrics_are_the_saved_models_own_scores(smoke_run):
  """Every method's binary accuracies and hierarchy score, recomputed from its saved checkpoint and the benchmark
  files without the experiment's evaluation code: a pair within 5e-7 of a tie may fall either way (embeddings
  computed in other batches differ by up to ~1e-7); every other pair must be counted as the run counted it."""
  import jax
  from vidjax import train
  from vidjax.data import pipeline
  workdir, results = smoke_run
  from vidjax.data.annotations import read_activitynet_captions
  from vidjax.data.features import FeatureStore
  config = load_config(ROOT / "configs/comp_activitynet.py:smoke")
  # The world's files as a user would read them: its test split's annotations and the token store.
  duration = {v.video_id: v.duration for v in read_activitynet_captions(workdir / "world" / "val_1.json").videos}
  store = FeatureStore(workdir / "world" / "store")
  triplets = [t for f in ("eval", "eval_multi")
              for t in comp.read_release(workdir / "benchmark" / f"comp_activitynet_{f}.json")]
  inputs = sorted({(t.video_id, t.video_span) for t in triplets})
  video = np.stack([store.get_one("tokens", v)[comp.span_frames(store.item_shape("tokens")[0], duration[v], span,
                                                                config.model.frames)] for v, span in inputs])
  texts = sorted({x for t in triplets for x in (t.positive, t.negative)})
  model, tokenizer, _ = vidclip_setup(config.model, video.shape[-1], video.shape[-2])
  tokens = pipeline.text_token_batch(tokenizer, texts, config.model.max_text_len)
  embed = jax.jit(lambda p: model.apply({"params": p}, video, tokens["input_ids"], tokens["attention_mask"])[:2])
  level = {"positive": 0, **dict(zip(config.finetune.hierarchy, config.finetune.levels))}
  eps, narrow = 5e-7, []
  for method in METHODS:
    v, t = (np.asarray(x, np.float64) for x in embed(train.load_params(
        workdir / "models" / ("base" if method == "zero_shot" else method))))
    sim = lambda t_: v[inputs.index((t_.video_id, t_.video_span))] @ t[texts.index(t_.positive)]  # noqa: E731
    neg = lambda t_: v[inputs.index((t_.video_id, t_.video_span))] @ t[texts.index(t_.negative)]  # noqa: E731
    reported = results["metrics"][method]
    for kind in comp.EVAL_TYPES:
      margin = np.array([sim(x) - neg(x) for x in triplets if x.type == kind])
      lo, hi = 100 * np.mean(margin > eps), 100 * np.mean(margin > -eps)
      assert lo - 1e-9 <= reported[kind] <= hi + 1e-9, (method, kind, lo, reported[kind], hi)
      narrow.append(hi - lo)
    # Hierarchy: per video input, its positive and negatives with their levels; pairs across levels within an
    # input, pooled per test video (its full input and its seg-mismatch crop), the shares averaged over videos.
    groups: dict = {}
    for x in triplets:
      g = groups.setdefault((x.video_id, x.video_span), {"positive": sim(x)})
      g[x.type] = neg(x)
    by_video: dict = {}
    for (video_id, _), g in groups.items():
      by_video.setdefault(video_id, []).extend(g[a] - g[b] for a in g for b in g if level[a] < level[b])
    assert len(by_video) < len(groups)  # crops share their video's group
    lo, hi = [], []
    for pairs in by_video.values():
      lo.append(np.mean(np.array(pairs) > eps))
      hi.append(np.mean(np.array(pairs) > -eps))
    assert 100 * np.mean(lo) - 1e-9 <= reported["hierarchy"] <= 100 * np.mean(hi) + 1e-9, method
    narrow.append(100 * (np.mean(hi) - np.mean(lo)))
  # Most bands are exact (no pair near a tie), so a miscounted pair shows.
  assert np.mean(np.array(narrow) == 0) >= 0.5, narrow


def test_a_rerun_resumes_and_a_changed_config_is_refused(smoke_run):
  workdir, results = smoke_run
  again = E.run(load_config(ROOT / "configs/comp_activitynet.py:smoke"), workdir)
  assert again["metrics"] == results["metrics"]
  config = load_config(ROOT / "configs/comp_activitynet.py:smoke")
  config.finetune.lam = 1.0
  with pytest.raises(ValueError, match="finetune.lam"):
    E.run(config, workdir)


@pytest.mark.parametrize("key,value,match", [
    ("finetune.hierarchy", ("temp_reorder", "bogus"), "finetune.hierarchy"),
    ("finetune.levels", (1, 1), "finetune.levels"),
    ("finetune.pref_order", "strict", "finetune.pref_order"),
    ("pretrain.stack", 3, "model.frames"),
    ("model.init_temperature", 2.0, "init_temperature"),
    ("model.text_layers", 12, "model.text_layers"),
    ("model.init", "lvt", "model.lvt_checkpoint"),
])
def test_bad_config_values_get_one_clear_error(tmp_path, key, value, match):
  config = load_config(ROOT / "configs/comp_youcook2.py:smoke")
  section, field = key.split(".")
  if key == "model.text_layers":  # the paper's config (MiniLM text tower) on a user's store
    config = load_config(ROOT / "configs/comp_youcook2.py")
    config.data.features, config.data.annotations = str(tmp_path), "x.json"
  config[section][field] = value
  with pytest.raises(ValueError, match=match):
    E.run(config, tmp_path / "run")


def test_the_world_variant_and_a_users_store_exclude_each_other(tmp_path):
  paper = load_config(ROOT / "configs/comp_activitynet.py")
  with pytest.raises(ValueError, match=r"configs/comp_activitynet.py:world"):
    E.run(paper, tmp_path / "a")   # the paper's settings need data
  world = load_config(ROOT / "configs/comp_activitynet.py:world")
  world.data.features = str(tmp_path)
  with pytest.raises(ValueError, match="drop :world"):
    E.run(world, tmp_path / "b")


def test_real_annotations_and_a_store_become_triplets_and_model_inputs(tmp_path):
  """Real YouCook2 val/train through the builder, a (random) token store, the seg-mismatch crop inside the span."""
  from vidjax.data import features
  from vidjax.data.annotations import read_youcook2
  path = ROOT.parent / "shared" / "data" / "youcook2" / "youcookii_annotations_trainval.json"
  ids = sorted(v.video_id for split in ("train", "val") for v in read_youcook2(path, split))
  tokens = np.random.default_rng(0).normal(size=(len(ids), 8, 2, 4)).astype(np.float32)
  features.write_arrays(tmp_path / "store", {"tokens": (ids, tokens)})
  config = load_config(ROOT / "configs/comp_youcook2.py")
  config.data.features, config.data.annotations = str(tmp_path / "store"), str(path)
  data = M.load(config, tmp_path / "run")
  assert not data.synthetic and data.path["path"] == "real" and data.path["skipped_videos"]["count"] == 0 and {c["split"] for c in data.counts} == {"eval", "train"}
  # The evaluation split has multi too: the top level of the hierarchy score (not a binary-accuracy type).
  assert {t.type for t in data.eval} == {t.type for t in data.train} == set(comp.TRAIN_TYPES)
  texts = TextTable()
  es = M.eval_set(data, 16, texts, dict(zip(config.finetune.hierarchy, config.finetune.levels)))
  assert set(es.by_type) == set(comp.EVAL_TYPES) and es.levels.tolist() == [0, 1, 1, 1, 2]
  hv, ht = es.hierarchy
  multi = {(t.video_id, t.video_span) for t in data.eval if t.type == "multi"}
  assert (ht[:, 4] >= 0).sum() == len(multi) and len(hv) == len({(t.video_id, t.video_span) for t in data.eval})
  # The hierarchy score's groups are the test videos: a full video and its seg-mismatch crop share one.
  row = {v: i for i, v in enumerate(data.video_ids)}
  assert sorted(set(es.hierarchy_videos.tolist())) == sorted({row[t.video_id] for t in data.eval})
  assert np.all(es.video_rows[hv][:, 0] == es.hierarchy_videos)
  vi, _, _ = es.by_type["seg_mismatch"]
  seg = [t for t in data.eval if t.type == "seg_mismatch"]
  for k, t in enumerate(seg[:50]):
    frames = es.frame_rows[vi[k]]
    r = row[t.video_id]
    centres = (frames + 0.5) * data.durations[r] / data.num_frames
    assert np.all(es.video_rows[vi[k]] == r)
    assert np.all((centres >= t.query[0] - data.durations[r] / data.num_frames) & (centres <= t.query[1] + data.durations[r] / data.num_frames))
  x = data.gather(es.video_rows[:3], es.frame_rows[:3])
  assert x.shape == (3, 16, 2, 4)
  np.testing.assert_array_equal(x[0, 0], tokens[es.video_rows[0, 0], es.frame_rows[0, 0]])
  # A store that lacks benchmark videos: they are skipped and counted (data.skip_missing), or with
  # skip_missing=False one clear error.
  features.write_arrays(tmp_path / "small", {"tokens": (ids[:40], tokens[:40])})
  config.data.features = str(tmp_path / "small")
  small = M.load(config, tmp_path / "run_small")
  assert small.path["skipped_videos"]["count"] == len(ids) - 40 and set(small.video_ids) <= set(ids[:40])
  assert all(t.video_id in set(ids[:40]) for t in small.train + small.eval)
  config.data.skip_missing = False
  with pytest.raises(ValueError, match=rf"{len(ids) - 40} of {len(ids)} benchmark videos have no \['tokens'\]"):
    M.load(config, tmp_path / "run_strict")


def test_the_text_tower_can_start_from_a_videoprism_lvt_checkpoint(tmp_path):
  """model.init='lvt': SentencePiece ids, the LvT text encoder's weights from an official-layout .npz."""
  import jax
  from vidjax import checkpoints
  from vidjax.data import pipeline
  from vidjax.models import videoprism
  from vidjax.models import vidclip as V
  from vidjax.ops import flatten_dict
  from vidjax.tokenizers.sentencepiece import SentencePieceTokenizer
  spm = ROOT.parent / "shared" / "data" / "videoprism_assets" / "test_spm.model"
  mc = load_config(ROOT / "configs/comp_activitynet.py:smoke").model
  lvt = videoprism.FactorizedVideoCLIP(patch_size=2, pos_emb_shape=(2, 2, 2), num_spatial_layers=1, num_temporal_layers=1,
                                       mlp_dim=8, num_auxiliary_layers=1, vocabulary_size=1000,
                                       num_unimodal_layers=mc.text_layers, model_dim=mc.text_hidden, num_heads=mc.text_heads)
  checkpoints.save_npz(videoprism.init_params(lvt, seed=1), tmp_path / "lvt.npz")
  mc.update(init="lvt", lvt_checkpoint=str(tmp_path / "lvt.npz"), spm_path=str(spm), text_mlp=4 * mc.text_hidden)
  model, tokenizer, fresh = vidclip_setup(mc, 8, 3)
  params = fresh(jax.random.PRNGKey(0))
  official = flatten_dict(checkpoints.read_npz(tmp_path / "lvt.npz"))
  for k, v in flatten_dict(params["text"]["lvt"]).items():
    np.testing.assert_array_equal(v, official["params/text_encoder/" + k])
  texts = ["The red cube moves left.", "Up."]
  batch = pipeline.text_token_batch(tokenizer, texts, mc.max_text_len)
  want = [SentencePieceTokenizer(spm).encode_one(x) for x in texts]
  assert batch["input_ids"].shape == (2, mc.max_text_len)
  assert batch["attention_mask"].sum(1).tolist() == [len(w) for w in want]
  assert batch["input_ids"][1, :len(want[1])].tolist() == want[1]
  t = model.apply({"params": params}, batch["input_ids"], batch["attention_mask"], method=V.VidClip.encode_text)
  np.testing.assert_allclose(np.linalg.norm(t, axis=-1), 1.0, rtol=1e-5)
  mc.text_layers += 1  # a checkpoint of another shape is one clear error naming the file
  with pytest.raises(checkpoints.CheckpointMismatchError, match="lvt.npz"):
    vidclip_setup(mc, 8, 3)[2](jax.random.PRNGKey(0))


def test_the_world_is_written_as_a_users_files_and_read_through_the_one_path(smoke_run, tmp_path):
  """The `world` variant writes the world's events in the dataset's release format, its lexicon and its motion
  tokens as a store (float32: the values the world generates, exactly), and the run reads only those files: the
  benchmark it built equals the one built from the world in memory with the world's own rewriter."""
  from vidjax.data.annotations import read_activitynet_captions, read_youcook2
  from vidjax.data.features import FeatureStore
  from vidjax.worlds import moving_objects as mo
  workdir, results = smoke_run
  config = load_config(ROOT / "configs/comp_activitynet.py:smoke")
  world = mo.make_moving_object_world(mo.world_config_from(config.world), seed=config.seed)
  assert results["path"] == "world" and results["provenance"]["store"] == str(workdir / "world" / "store")
  for split, name in (("test", "val_1.json"), ("train", "train.json")):
    assert comp.events_from_activitynet(read_activitynet_captions(workdir / "world" / name)) == \
        mo.comp_events(world, split)
  store = FeatureStore(workdir / "world" / "store")
  assert store.metadata["synthetic"] and store.metadata["world"] == dict(config.world)
  tokens = mo.motion_tokens(world, config.seed, world.config.noise)
  row = {v.video_id: i for i, v in enumerate(world.data.videos)}
  ids = world.ids(kinds=("base",))
  assert sorted(store.ids("tokens")) == ids
  np.testing.assert_array_equal(np.stack([store.get_one("tokens", v) for v in ids]), tokens[[row[v] for v in ids]])
  assert comp.load_lexicon(workdir / "world" / "lexicon.json") == mo.COMP_LEXICON
  rewriter = comp.TemplateRewriter(mo.COMP_LEXICON, connectives=False)
  built, _ = comp.build_comp(mo.comp_events(world, "test"), split="eval", types=comp.TRAIN_TYPES, seed=config.seed,
                             drop_global=False, rewriter=rewriter, name="activitynet-comp")
  assert comp.read_release(workdir / "benchmark" / "comp_activitynet_eval.json") == \
      [t for t in built if t.type != "multi"]
  # YouCook2's release format holds the same events (both splits in one file).
  small = mo.make_moving_object_world(mo.world_config_from({**config.world, "num_train_groups": 3,
                                                            "num_eval_groups": 2}), seed=1)
  keys = mo.write_comp(small, tmp_path, seed=1, world_fields={}, dataset="youcook2")
  assert set(keys) == {"annotations", "lexicon", "features"}
  for split, subset in (("train", "train"), ("test", "val")):
    assert comp.events_from_youcook2(read_youcook2(keys["annotations"], subset)) == mo.comp_events(small, split)


def test_the_suite_reads_the_finished_runs_files_and_reproduces_its_numbers(smoke_run):
  """`vidjax.methods.comp.suite` (what evaluate_all reads) finds the world's files through the run's world record
  and its models score the run's own Comp benchmark as the run did."""
  workdir, results = smoke_run
  config = load_config(ROOT / "configs/comp_activitynet.py:smoke")
  models, benchmarks = M.suite(common.recorded_world_data(config, workdir), workdir)
  assert [m.name for m in models] == list(METHODS)
  space = f"the feature store {workdir / 'world' / 'store'}"
  assert {b.space for b in benchmarks} == {m.space for m in models} == {space}
  bench = next(b for b in benchmarks if b.kind == "comp")
  for model in models[3:4]:  # comploss
    cell = model.evaluate(bench)
    for kind in (*comp.EVAL_TYPES, "all"):
      assert cell[kind] == pytest.approx(results["metrics"][model.name][kind], abs=0.011), (model.name, kind)


def test_table1_counts_are_of_the_triplets_the_run_uses():
  """The printed Table 1 counts what was built and kept (videos with features) or read from a release file, not
  everything the annotation files could give."""
  from types import SimpleNamespace
  t = lambda v, kind: SimpleNamespace(video_id=v, type=kind)  # noqa: E731
  built = {"eval": [t("a", "temp_reorder"), t("a", "multi")], "train": [t("b", "seg_mismatch"), t("c", "multi")]}
  made = {"eval": {"split": "eval", "videos": 4_900, "temp_reorder": 18_000, "total": 18_214,
                   "dropped_validation": {"x": 2}, "skipped": {}},
          "train": {"split": "train", "videos": 10_000, "total": 37_231, "dropped_validation": {}, "skipped": {}}}
  counts = M.used_counts(built, {"eval": ["A"], "train": ["B", "C", "D"]}, made, released={"train"})
  assert [(c["split"], c["source"], c["videos"], c["total"]) for c in counts] == [
      ("eval", "annotations", 1, 2), ("train", "release file", 2, 2)]
  assert counts[0]["temp_reorder"] == counts[0]["multi"] == 1 and counts[0]["dropped_validation"] == {"x": 2}
  assert counts[1]["seg_mismatch"] == 1 and counts[1]["dropped_validation"] == {}
  assert "18214" not in comp.format_counts(counts) and "37231" not in comp.format_counts(counts)


def _np_eq2(s_pos, s_neg, mask, pairs):
  """Eq. 2 with loops, the pairs (i, j) of its second sum given: per row sum_i [s_i - s_pos]_+ + sum_(i, j)
  [s_j - s_i]_+ over the negatives that exist, averaged over rows."""
  total = 0.0
  for r in range(len(s_pos)):
    total += sum(max(s_neg[r, i] - s_pos[r], 0.0) for i in range(s_neg.shape[1]) if mask[r, i])
    total += sum(max(s_neg[r, j] - s_neg[r, i], 0.0) for i, j in pairs if mask[r, i] and mask[r, j])
  return total / len(s_pos)


def test_comploss_is_eq2_with_every_pair_by_default_and_the_levels_reading_is_an_option():
  """The default reading of eq. 2 (§3.2) hinges every pair of the hierarchy temp-reorder < action-replace <
  seg-mismatch < multi (temp-reorder above action-replace included), CompPretrain's reorder < partial; the
  "levels" reading only the pairs across `levels`. The loss the fine-tuning trains with (`training_section`'s
  levels into `losses.comp_total_loss`, mode and λ as traced weights, as the train step gives them) against
  NumPy loops, float64, on random embeddings (rtol 1e-5: float32 cosines)."""
  import jax
  from vidjax import losses
  from vidjax.defaults.common import with_values
  paper = load_config(ROOT / "configs/comp_activitynet.py")
  for section in (paper.pretrain, paper.finetune):
    assert section.pref_order == "paper"
  assert paper.pretrain.video_lr == paper.pretrain.lr == 1e-7  # §4.1's rate, the video tower's too
  world = load_config(ROOT / "configs/comp_activitynet.py:world")
  assert world.finetune.pref_order == "paper" and world.pretrain.video_lr == world.pretrain.lr == 1e-3  # its own
  ft = paper.finetune
  assert tuple(ft.hierarchy) == ("temp_reorder", "action_replace", "seg_mismatch", "multi")
  n = len(ft.hierarchy)
  every = [(i, j) for i in range(n) for j in range(i + 1, n)]
  across = [(i, j) for i in range(n) for j in range(n) if ft.levels[i] < ft.levels[j]]
  assert (0, 1) in every and (0, 1) not in across
  assert M.eq2_pairs(ft) == [[ft.hierarchy[i], ft.hierarchy[j]] for i, j in every]
  assert M.eq2_pairs(paper.pretrain) == [["reorder", "partial"]]
  rng = np.random.default_rng(0)
  b, d, tau, lam = 6, 8, 0.1, 100.0
  video, text = rng.normal(size=(b, d)).astype(np.float32), rng.normal(size=(b, d)).astype(np.float32)
  negs = rng.normal(size=(b, n, d)).astype(np.float32)
  mask = (rng.random((b, n)) > 0.25).astype(np.float32)
  unit = lambda x: x / np.linalg.norm(x, axis=-1, keepdims=True)  # noqa: E731
  v, t, ng = unit(video.astype(np.float64)), unit(text.astype(np.float64)), unit(negs.astype(np.float64))
  s_pos, s_neg = np.sum(v * t, -1), np.einsum("bd,bnd->bn", v, ng)
  step = jax.jit(lambda w, levels: losses.comp_total_loss(video, text, negs, mask, tau, weights=w, levels=levels),
                 static_argnums=1)
  for reading, pairs in (("paper", every), ("levels", across)):
    section = M.training_section(with_values(ft, {"pref_order": reading}) if reading != "paper" else ft)
    loss, aux = step(losses.comp_mode_weights("comploss", lam), tuple(section.levels))
    pref = _np_eq2(s_pos, s_neg, mask, pairs)
    np.testing.assert_allclose(aux["pref"], pref, rtol=1e-5)
    np.testing.assert_allclose(loss, aux["con"] + lam * pref, rtol=1e-5)
  # A model that scores the action-replaced paragraph above the reordered one (both below the positive) pays for it
  # in the paper's reading only.
  ordered = np.array([[0.9, 0.3, 0.5, 0.2, 0.1]], np.float32)  # positive, TR, AR, SM, M
  paper_levels = M.pref_levels(ft)
  levels_levels = M.pref_levels(with_values(ft, {"pref_order": "levels"}))
  assert float(losses.comp_preference_loss(ordered[:, 0], ordered[:, 1:], levels=paper_levels)) == pytest.approx(0.2)
  assert float(losses.comp_preference_loss(ordered[:, 0], ordered[:, 1:], levels=levels_levels)) == 0.0



def test_a_few_test_videos_train_table2s_rows_only_and_say_so(capsys):
  """On fewer test videos than `table_min_queries` the fine-tunings beyond Table 2's rows (NegCLIP, CompLoss on
  NegCLIP's L_con) are left out, printed and recorded; Table 5 keeps the rows it can fill; enough videos, or
  `table_min_queries=0`, train them all. A bad `ablations` is one clear error."""
  from types import SimpleNamespace
  config = load_config(ROOT / "configs/comp_youcook2.py")
  prepared = lambda n: SimpleNamespace(es=SimpleNamespace(pairs=(np.arange(n), np.arange(n))))  # noqa: E731
  fitted, clipped = M.fit_rows(config, prepared(15))
  assert clipped == {"ablations": [["negclip", "negclip_pref"], []]}
  assert "clipped config.ablations" in capsys.readouterr().out
  assert [m for m, _, _ in M.finetunes(fitted)] == ["contrastive", "comploss", "comppretrain_comploss"]
  assert M.methods(fitted) == ("zero_shot", "contrastive", "comploss", "comppretrain_comploss")
  for many in (M.fit_rows(config, prepared(100))[0], M.fit_rows(with_values(config, {"table_min_queries": 0}),
                                                                    prepared(15))[0]):
    assert [m for m, _, _ in M.finetunes(many)] == [m for m, _, _ in M.FINETUNES]
    assert M.methods(many) == METHODS
  scores = {m: {k: float(i) for k in METRICS} for i, m in enumerate(("zero_shot", "comppretrain", *M.methods(fitted)))}
  assert set(M.tables(scores, 4)["pretraining_ablation"]) == {"zero_shot_stack1", "zero_shot_stack4",
                                                              "comploss_stack1", "comploss_stack4"}
  bad = load_config(ROOT / "configs/comp_youcook2.py:smoke")
  bad.ablations = ("negclip", "bogus")
  with pytest.raises(ValueError, match="ablations"):
    E.validate(bad)
