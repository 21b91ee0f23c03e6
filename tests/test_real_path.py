"""The real path end to end, per method, on the rendered release-format corpus (`vidjax.worlds.release`, smoke):
mp4 files + release annotation files -> `configs/prepare.py` (a tiny random VideoPrism) -> one store per dataset
-> each method's config with `data.features` -> results.json with the contract's keys, `"path": "real"`, the
store's provenance and the skipped videos. Also the real path's bad inputs: one clear error each, before training.

The corpus, the stores and the method runs are the session's shared `real_path` (conftest.py): the notebooks read
the same finished runs.
"""
import json
import os
from pathlib import Path

import ml_collections
import numpy as np
import pytest

from vidjax import search as search_cli
from vidjax.data.annotations import read_annotations
from vidjax.data.features import FeatureStore
from vidjax.experiments import evaluate_all, prepare, retrieval
from vidjax.experiments.common import REQUIRED_KEYS, load_config
from vidjax.search import open_index

ROOT = Path(__file__).resolve().parents[1]


def _method(real_path, step: str, store: str) -> dict:
  """A method's finished run on a prepared store, checked against the contract: the keys, a real path on rendered
  (synthetic) pixels, and the provenance of the store as prepared (no run writes into it)."""
  _, results = real_path(step)
  _, prepared = real_path(store)
  assert set(REQUIRED_KEYS) <= set(results)
  assert results["path"] == "real" and results["synthetic"] is True
  assert results["provenance"] == prepared["provenance"] and results["provenance"]["random_init"] is True
  assert results["provenance"]["fingerprint"] == FeatureStore(results["provenance"]["store"]).fingerprint()
  assert set(results["provenance"]["precision"]) == {"train", "extract", "eval", "platform", "device_kind"}
  return results


def test_prepare_writes_every_kind_each_method_reads(real_path):
  _, r = real_path("prep_msrvtt")
  assert r["path"] == "real" and r["synthetic"] is True and r["skipped_videos"]["count"] == 0
  store = FeatureStore(r["provenance"]["store"])
  assert {"clip", "clip_mean", "tokens", "text"} <= set(store.kinds())
  assert store.item_shape("tokens")[0] == 16 and store.metadata["synthetic"] is True  # VEDJE's T
  # YouCook2: every step clip (CAST, the stack) and every whole video (YouCook2-Comp), 8 frames (CAST App. A).
  yc = FeatureStore(real_path("prep_youcook2")[1]["provenance"]["store"])
  assert yc.metadata["num_frames"] == 8
  assert any("#" in i for i in yc.ids("clip")) and any("#" not in i for i in yc.ids("tokens"))
  # ActivityNet: per-sentence and per-paragraph texts from one run.
  an = FeatureStore(real_path("prep_activitynet")[1]["provenance"]["store"])
  assert any("#" in i for i in an.ids("text")) and any(i in an.ids("clip") for i in an.ids("text"))


def test_prepare_lists_missing_and_undecodable_videos(real_path, tmp_path):
  corpus_dir, corpus = real_path("corpus")
  release = json.loads(Path(corpus["youcook2"]["annotations"]).read_text())
  ids = sorted(release["database"])[:4]
  videos = tmp_path / "videos"
  videos.mkdir()
  os.symlink(Path(corpus["youcook2"]["videos"]) / f"{ids[0]}.mp4", videos / f"{ids[0]}.mp4")
  os.symlink(Path(corpus["youcook2"]["videos"]) / f"{ids[1]}.mp4", videos / f"{ids[1]}.mp4")
  (videos / f"{ids[2]}.mp4").write_bytes(b"not a video")  # ids[3]: no file at all
  annotations = tmp_path / "annotations.json"
  annotations.write_text(json.dumps({"database": {v: release["database"][v] for v in ids}}))
  config = load_config(ROOT / "configs/prepare.py:smoke")
  config.dataset, config.data.videos, config.data.annotations = "youcook2", str(videos), str(annotations)
  r = prepare.run(config, tmp_path / "prep")
  assert r["skipped_videos"]["count"] == 2 and r["synthetic"] is False  # not the corpus folder: no marker
  assert Path(r["skipped_videos"]["file"]).read_text().splitlines() == sorted(
      [f"{ids[2]}\tdoes not decode", f"{ids[3]}\tno video file"])
  assert r["metrics"]["prepare"]["valid_videos"] == 2
  # Only the texts of videos with a file are embedded (issue 52: not the whole release's captions).
  steps = {v: len(release["database"][v]["annotations"]) for v in ids}
  assert r["metrics"]["prepare"]["release_texts"] == sum(steps.values())
  assert r["metrics"]["prepare"]["texts"] == steps[ids[0]] + steps[ids[1]] + steps[ids[2]]
  assert not any(t.startswith(ids[3]) for t in FeatureStore(r["provenance"]["store"]).ids("text"))


def test_prepare_refuses_a_video_id_found_at_two_paths(real_path, tmp_path):
  """Issue 62: two files for one video id (a re-download beside the original) are one error naming both, before
  anything is extracted (the finder would take one and ignore the other)."""
  _, corpus = real_path("corpus")
  release = json.loads(Path(corpus["youcook2"]["annotations"]).read_text())
  video_id = sorted(release["database"])[0]
  (tmp_path / "videos" / "old").mkdir(parents=True)
  for where in ("videos", "videos/old"):
    os.symlink(Path(corpus["youcook2"]["videos"]) / f"{video_id}.mp4", tmp_path / where / f"{video_id}.mp4")
  annotations = tmp_path / "annotations.json"
  annotations.write_text(json.dumps({"database": {video_id: release["database"][video_id]}}))
  config = load_config(ROOT / "configs/prepare.py:smoke")
  config.dataset, config.data.videos, config.data.annotations = "youcook2", str(tmp_path / "videos"), str(annotations)
  with pytest.raises(ValueError, match=rf"video id '{video_id}' matches 2 files under .*: .*videos/{video_id}.mp4 "
                                       rf"and .*videos/old/{video_id}.mp4"):
    prepare.run(config, tmp_path / "prep")
  assert not (tmp_path / "prep" / "features").exists()


def test_prepare_refuses_a_file_of_another_dataset(real_path, tmp_path):
  _, corpus = real_path("corpus")
  config = load_config(ROOT / "configs/prepare.py:smoke")
  config.dataset, config.data.videos = "youcook2", corpus["youcook2"]["videos"]
  config.data.annotations = corpus["coin"]["train_annotations"]
  with pytest.raises(ValueError, match="coin_train_70.json"):
    prepare.run(config, tmp_path / "run")


def test_retrieval_skips_a_video_the_store_lacks_and_counts_it(real_path, tmp_path):
  results = _method(real_path, "retrieval_msrvtt", "prep_msrvtt")
  assert results["skipped_videos"]["count"] == 0 and results["metrics"]["stage1"]["t2v_r1"] >= 0
  _, corpus = real_path("corpus")
  csv = tmp_path / "test.csv"  # the 1k-A file of a partial download: one more video than the store has
  csv.write_text(Path(corpus["msrvtt"]["test_csv"]).read_text() + "ret999,msr99999,video99999,a video nobody has\n")
  config = load_config(ROOT / "configs/retrieval_msrvtt.py")
  config.data.features, config.data.annotations = results["provenance"]["store"], str(csv)
  r = retrieval.run(config, tmp_path / "run")
  assert r["skipped_videos"] == {"count": 1, "file": "skipped_videos.txt"}
  assert (tmp_path / "run" / "skipped_videos.txt").read_text().split() == ["video99999"]
  assert r["benchmark"]["corpus_videos"] == results["benchmark"]["corpus_videos"]
  config.data.skip_missing = False  # strict
  with pytest.raises(ValueError, match=r"1 of \d+ corpus videos have no \['clip'\] features .*video99999"):
    retrieval.run(config, tmp_path / "strict")


def test_grdr_bad_inputs_on_a_store_are_one_error_each_before_training(real_path, tmp_path):
  """A video the store lacks (strict), a query without a text feature, and too large a codebook: one clear error
  each, raised while the corpus is read, before any model is built."""
  from vidjax.methods import grdr as GM
  run, results = real_path("grdr_msrvtt")
  saved = lambda: ml_collections.ConfigDict(json.loads((run / "config.json").read_text()))  # noqa: E731
  config = saved()
  lines = Path(config.data.annotations).read_text().splitlines()
  video = lines[1].split(",")[2]
  missing = tmp_path / "missing.csv"
  missing.write_text("\n".join(lines + ["ret999,msr99999,video99999,a video nobody has"]) + "\n")
  config.data.annotations, config.data.skip_missing = str(missing), False
  # the per-frame kind too: the trained dense rows and the X-Pool rerank read the store's per-frame embeddings
  with pytest.raises(ValueError, match=r"1 of \d+ test videos have no \['clip', 'frame_clip'\] features .*video99999"):
    GM.read_corpus(config, tmp_path / "a")
  no_text = tmp_path / "no_text.csv"
  vid_key = "msr" + video[len("video"):]  # the release writes msr<N> beside video<N> (the reader checks it)
  no_text.write_text("\n".join(lines + [f"ret998,{vid_key},{video},a caption nobody embedded"]) + "\n")
  config.data.annotations = str(no_text)
  from vidjax.data.features import MissingFeatureError
  with pytest.raises(MissingFeatureError, match="test queries: .* no 'text' features for 1 of .*'ret998'"):
    GM.read_corpus(config, tmp_path / "b")
  config = saved()
  corpus = GM.read_corpus(config, tmp_path / "c")
  config.model.num_codes = len(corpus.train) + 1
  with pytest.raises(ValueError, match=f"larger than the {len(corpus.train)} training videos"):
    GM.check_budget(config, corpus)


def test_a_store_without_the_kind_or_a_split_the_file_lacks_is_one_error(real_path, tmp_path):
  _, corpus = real_path("corpus")
  config = load_config(ROOT / "configs/retrieval_msrvtt.py")
  config.data.features = real_path("prep_msrvtt")[1]["provenance"]["store"]
  config.data.annotations = corpus["msrvtt"]["test_csv"]
  config.data.clip_kind = "clip_lvt"
  with pytest.raises(ValueError, match=r"no kind \['clip_lvt'\].*configs/prepare.py"):
    retrieval.run(config, tmp_path / "run")
  config.data.clip_kind = "clip"
  config.data.annotations = corpus["msrvtt"]["annotations"]
  config.data.split = "testing"
  with pytest.raises(ValueError, match=r"no videos in split 'testing' \(splits present: \['test', 'train'\]\)"):
    retrieval.run(config, tmp_path / "split")


def test_cast(real_path):
  results = _method(real_path, "cast_youcook2", "prep_youcook2")
  assert results["skipped_videos"]["count"] == 0 and "synthetic rendered videos" in results["dataset"]
  assert {"cast", "zero_shot"} <= set(results["metrics"])


def test_vedje(real_path):
  results = _method(real_path, "vedje_msrvtt", "prep_msrvtt")
  assert set(results["metrics"]) == {"stage1", "vedje"}
  # The id list defines the training set (the JSON's "train" field is not applied on top of it).
  _, corpus = real_path("corpus")
  listed = set(Path(corpus["msrvtt"]["train_list"]).read_text().split())
  sentences = json.loads(Path(corpus["msrvtt"]["annotations"]).read_text())["sentences"]
  assert results["benchmark"]["train_queries"] == sum(s["video_id"] in listed for s in sentences)


def test_videocomp(real_path):
  results = _method(real_path, "comp_activitynet", "prep_activitynet")
  assert {"zero_shot", "comploss"} <= set(results["metrics"])
  assert {"temp_reorder", "action_replace", "seg_mismatch"} <= set(results["metrics"]["zero_shot"])


def test_genstate_trains_on_the_users_triplets_and_evaluate_all_reads_them(real_path, tmp_path):
  results = _method(real_path, "genstate", "prep_genstate")
  run, _ = real_path("genstate")
  _, corpus = real_path("corpus")
  assert results["counts"]["queries"] == len(json.loads(Path(corpus["genstate"]["test_annotations"]).read_text()))
  assert set(results["metrics"]) == {"zero_shot", "vidclip"} and (run / "models" / "vidclip").is_dir()
  # evaluate_all compares the users' runs on their own benchmarks: no rendered or procedural world appears.
  ea = load_config(ROOT / "configs/evaluate_all.py")
  ea.workdirs = (str(run), str(real_path("cast_youcook2")[0]))
  out = evaluate_all.run(ea, tmp_path / "ea")
  assert out["path"] == "real"
  assert set(out["benchmarks"]) == {"GenState (test.json) [SYNTHETIC]", "R@K (test.json) [SYNTHETIC]",
                                    "CVR (youcook2) [SYNTHETIC]"}
  assert all("world" not in b["space"] for b in out["benchmarks"].values()), out["benchmarks"]
  assert not (tmp_path / "ea" / "runs").exists() and not (run / "world").exists()
  assert out["metrics"]["genstate/vidclip"]["GenState (test.json) [SYNTHETIC]"]["acc_tri"] == \
      results["metrics"]["vidclip"]["acc_tri"]


# A typed query's text embedding is compared with the store's (extracted at precision.extract, "highest"); the
# index's encoder runs outside any experiment, at JAX's default precision unless asked.
@pytest.mark.highest_precision
def test_stack_and_a_typed_query(real_path, capsys):
  results = _method(real_path, "stack_youcook2", "prep_youcook2")
  run, _ = real_path("stack_youcook2")
  assert {"recall", "recall_rerank", "full_stack"} <= set(results["metrics"])
  assert results["corpus"]["reranker"] == "vedje" and (run / "train" / "vedje").is_dir()  # recall -> VEDJE -> CAST
  assert results["corpus"]["k_recall"] <= results["corpus"]["clips"]  # clipped to the corpus
  # A typed query goes through the store's text tower: a caption typed in gets the embedding extraction gave it.
  _, corpus = real_path("corpus")
  store = FeatureStore(results["provenance"]["store"])
  clip = read_annotations("youcook2", corpus["youcook2"]["annotations"])[0].clips[1]
  np.testing.assert_allclose(open_index(run / "index").encode(clip.text), store.get("text", [clip.clip_id])[0],
                             atol=1e-5)
  assert search_cli.main(["--index", str(run / "index"), "a shape nobody rendered", "--k", "3"]) == 0
  assert "a shape nobody rendered" in capsys.readouterr().out


def test_grdr_on_a_real_store(real_path):
  results = _method(real_path, "grdr_msrvtt", "prep_msrvtt")
  assert set(results["metrics"]) == {"inductive", "full_corpus"}
  for setting in ("inductive", "full_corpus"):
    assert set(results["metrics"][setting]) == {"dense_backbone", "clip4clip", "xpool", "grdr_paper", "grdr",
                                                "grdr_cap5"}
    assert results["metrics"][setting]["grdr"]["reranker"] == "xpool"  # over the store's frame_clip kind
    assert 0.0 <= results["metrics"][setting]["grdr"]["candidate_recall"] <= 100.0
    # the dataset config trains Algorithm 1: its `grdr` row is the paper's
    assert results["metrics"][setting]["grdr"] == results["metrics"][setting]["grdr_paper"]
  run, _ = real_path("grdr_msrvtt")
  assert results["dataset"] == "msrvtt (synthetic rendered videos)"
  assert sorted(p.name for p in (run / "models").iterdir()) == ["clip4clip", "grdr", "xpool"]
  assert (run / "models" / "grdr" / "layer2_cotrain").is_dir()
  config = json.loads((run / "config.json").read_text())
  assert config["model"]["query_encoder"] == "t5" and config["train"]["schedule"] == "progressive"


def test_real_path_summary_reads_every_line_from_the_runs(real_path, tmp_path, capsys):
  """`python -m vidjax.real_path OUT` (launch/real_path.sh's last step) on the smoke runs laid out as the script
  lays them out: each line's value and reference are the runs' own numbers, a run the script did not make is
  "not run", and a malformed times.tsv is one error naming its line."""
  from vidjax import real_path as summary_cli  # pylint: disable=g-import-not-at-top
  out = tmp_path / "out"
  (out / "runs").mkdir(parents=True)
  results = {}
  # the smoke VEDJE run stands in for the order-query run (its lines read the same keys)
  for step, folder in (("cast_youcook2", "cast_youcook2"), ("vedje_msrvtt", "vedje_msrvtt_order"),
                       ("comp_activitynet", "comp_activitynet"), ("genstate", "genstate"),
                       ("stack_youcook2", "stack_youcook2_vedje")):
    workdir, results[step] = real_path(step)
    (out / "runs" / folder).symlink_to(workdir)
  # GRDR's lines read the 150-capped row, which the smoke run (16 test videos) caps at 5: a results file with the
  # keys the lines read, numbers chosen so that one line holds and the other does not
  grdr = {"grdr_cap150": {"t2v_r1": 19.5, "candidate_recall": 79.9}, "xpool": {"t2v_r1": 21.5}}
  (out / "runs" / "grdr_msrvtt_facets").mkdir()
  (out / "runs" / "grdr_msrvtt_facets" / "results.json").write_text(json.dumps({"metrics": {"inductive": grdr}}))
  (out / "times.tsv").write_text("corpus\t3\tsmoke\t0\ncast youcook2\t120\tsmoke\t0\n")
  corpus_dir, _ = real_path("corpus")
  (out / "corpus").symlink_to(corpus_dir)  # its corpus_summary.json: the mechanisms' shares
  summary_cli.main([str(out)])
  summary = json.loads((out / "summary.json").read_text())
  assert summary["synthetic"] is True and summary["path"] == "real" and "SYNTHETIC" in capsys.readouterr().out
  lines = {(line["method"], line["dataset"]): line for line in summary["lines"]}
  cast = results["cast_youcook2"]["metrics"]
  assert lines["cast", "youcook2"]["value"] == pytest.approx(cast["cast"]["acc"])
  assert lines["cast", "youcook2"]["reference"] == pytest.approx(cast["zero_shot"]["acc"] + 10)
  assert lines["cast", "youcook2"]["holds"] == (cast["cast"]["acc"] >= cast["zero_shot"]["acc"] + 10)
  assert lines["cast", "coin"]["holds"] is None and lines["stack", "youcook2"]["holds"] is None  # not run
  assert (lines["grdr", "msrvtt facet queries"]["reference"], lines["grdr", "msrvtt facet queries"]["holds"]) == \
      (pytest.approx(19.5), True)  # X-Pool - 2, and 19.5 >= 19.5
  recall = lines["grdr", "msrvtt facet queries (recall)"]
  assert (recall["value"], recall["reference"], recall["holds"]) == (pytest.approx(79.9), 80.0, False)  # a constant
  comp = results["comp_activitynet"]["metrics"]
  assert lines["videocomp", "activitynet"]["holds"] == (comp["contrastive"]["temp_reorder"]
                                                        > comp["zero_shot"]["temp_reorder"])
  vedje, gs = results["vedje_msrvtt"]["metrics"], results["genstate"]["metrics"]
  assert lines["vedje", "msrvtt order queries"]["value"] == pytest.approx(vedje["vedje"]["t2v_r1"])
  assert lines["vedje", "msrvtt order queries"]["reference"] == pytest.approx(vedje["stage1"]["t2v_r1"] + 3)
  joint = lines["vedje", "msrvtt order queries (joint pass)"]
  split = results["vedje_msrvtt"]["prior_split"]
  assert (joint["value"], joint["reference"]) == (pytest.approx(split["joint_alone"]["t2v_r1"]),
                                                  pytest.approx(results["vedje_msrvtt"]["prior_split_chance"]["t2v_r1"]))
  assert joint["holds"] == (joint["value"] > joint["reference"])
  assert lines["genstate", "genstate"]["reference"] == pytest.approx(gs["zero_shot"]["acc_tri"])
  assert summary["backbone"] is None and summary["total_minutes"] == pytest.approx(2.05, abs=0.05)
  shares = json.loads((corpus_dir / "corpus_summary.json").read_text())
  assert summary["mechanisms"]["order"]["share"] == shares["order"]["share"] == 100.0
  assert set(summary["mechanisms"]) == {"order", "facets", "states"}
  assert "| cast youcook2 | 2.0 |" in (out / "summary.md").read_text()
  (out / "times.tsv").write_text("corpus\tthree\n")
  with pytest.raises(ValueError, match=r"times.tsv: line 1"):
    summary_cli.summarize(out)


def test_every_methods_real_path_line_reads_a_run_the_script_writes():
  """The table's real-path entries (`vidjax.methods.METHODS[m].real_path`) name run folders launch/real_path.sh
  writes (`$R/<folder>`, CAST's `$d` over its three datasets), and every method has at least one line."""
  import re  # pylint: disable=g-import-not-at-top
  from vidjax.methods import METHODS  # pylint: disable=g-import-not-at-top
  text = (ROOT / "launch" / "real_path.sh").read_text()
  written = set()
  for folder in re.findall(r'"\$R/([\w$]+)"', text):
    written |= {folder.replace("$d", d) for d in ("youcook2", "coin", "crosstask")} if "$d" in folder else {folder}
  for name, method in METHODS.items():
    assert method.real_path, name
    missing = [line.folder for line in method.real_path if line.folder not in written]
    assert not missing, (name, missing, sorted(written))
