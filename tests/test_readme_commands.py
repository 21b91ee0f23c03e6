"""Every README "Real data" command (docs/real_data.md, section 2) as written, per dataset, on the release files of
../shared/data as published plus placeholder mp4s named by their ids (`vidjax.worlds.placeholders`: SYNTHETIC
pixels), prepared with the tiny random VideoPrism (`configs/prepare.py:smoke`, as CI cannot hold the real one).

Each command is parsed from the guide itself (its config, its flags, nothing added) and run through `vidjax.main`
with `check=True` (`python -m vidjax.main ... --check`): the data are read through the readers, the benchmark is
built, every size is fitted to the data (clipped, with the record results.json would keep) and the run stops before
training. Retrieval, which trains nothing, runs whole and writes its results.json. The whole commands at the paper's
settings take minutes to hours each on 2 cores: `launch/small_corpora.sh` runs them all, each in its own process
(BENCHMARKS.md, "Small corpora"). Where ../shared/data has no copy of a release file the test writes one in its
release format and says so below (MSR-VTT's training JSON and id list; DiDeMo's training file is the published
validation file, the same format); CrossTask and MSVD have no public copy here (no English MSVD captions) and are
not walked.
"""
import ast
import csv
import json
import shutil
import shlex
from pathlib import Path
import re

import pytest

from vidjax import main
from vidjax.defaults.common import with_values
from vidjax.experiments.common import get_key, load_config
from vidjax.worlds import placeholders

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
GUIDE = ROOT / "docs" / "real_data.md"
PER_SPLIT = 8
# What a few videos per split must clip in each plain config (besides batch sizes): the paper's step budgets in
# passes over the data (VideoComp), CAST's held-out subset grown until its pools build, GRDR's codebooks at most the
# training videos (k-means initialises them), the tables no few test queries can resolve.
# The tables beside a method's main result are left out on so few test queries (`defaults.common.fit_tables`); a
# text length at most the run's longest text (VideoComp's MiniLM tower; ActivityNet's texts are shorter than 160).
TABLES = {"ablations", "diagnostics"}
EXPECTED_CLIPS = {"comp_youcook2": {"pretrain.steps", "finetune.steps"},
                  "comp_activitynet": {"pretrain.steps", "finetune.steps", "model.max_text_len"},
                  "cast_youcook2": {"data.heldout_fraction", "train.batch_size"},
                  "stack_youcook2": {"data.heldout_fraction", "train.batch_size"},
                  "vedje_msrvtt": {"train.batch_size"} | TABLES, "vedje_didemo": TABLES, "vedje_activitynet": TABLES,
                  "grdr_msrvtt": {"model.num_codes", "baselines.num_codes", "train.batch_size", "eval.beam_width",
                                  "eval.table3", "eval.baselines", "eval.compare_single_view", "eval.dense_rows"}}


def guide_commands() -> dict[str, list[list[str]]]:
  """{dataset section title: [argv of each `$M` / `python -m vidjax.search` command]} of the guide's section 2."""
  text = GUIDE.read_text()
  section = text[text.index("## 2."):text.index("### Sizes that do not fit")]
  out = {}
  for title, body in re.findall(r"### (.+?)\n(.*?)(?=\n### |\Z)", section, re.S):
    for block in re.findall(r"```bash\n(.*?)```", body, re.S):
      for line in block.replace("\\\n", " ").splitlines():
        argv = shlex.split(line, comments=True)
        if argv and (argv[0] == "$M" or argv[:3] == ["python", "-m", "vidjax.search"]):
          out.setdefault(title.strip(), []).append(argv)
  return out


def _value(old, text: str):
  """A flag's value as ml_collections' command line parses it for a field holding `old`."""
  if isinstance(old, bool):
    return text.lower() in ("true", "1")
  if isinstance(old, (int, float)):
    return type(old)(text)
  if isinstance(old, (tuple, list)):
    return tuple(ast.literal_eval(text))
  return text


def with_paths(value: str, files: dict[str, str]) -> str:
  """A flag's value as written in the guide with each (comma-separated) file name replaced by its path here."""
  return ",".join(files.get(part, part) for part in value.split(","))


def _config(argv: list[str], files: dict[str, str]):
  """The config of one `$M --config X --config.k=v ...` line, each file name replaced by its path here."""
  spec = argv[argv.index("--config") + 1]
  config = load_config(ROOT / spec)
  values = {}
  for arg in argv:
    m = re.fullmatch(r"--config\.([\w.]+)=(.*)", arg)
    if m:
      text = with_paths(m.group(2), files)
      values[m.group(1)] = _value(get_key(config, m.group(1)), text)
  return spec, with_values(config, values)


def _write_msrvtt_training(root: Path, test_ids: list[str], per_split: int = PER_SPLIT) -> dict[str, str]:
  """MSRVTT_data.json and train_list_jsfusion.txt in their release format (../shared/data has only the 1k-A test
  CSV): training videos video0.. with real captions borrowed from other test-CSV videos, plus the test videos."""
  rows = list(csv.reader(open(SHARED / "msrvtt" / "MSRVTT_JSFUSION_test.csv"), delimiter=";"))[1:]
  others = sorted({r[2] for r in rows} - set(test_ids))[:per_split]
  train = [f"video{i}" for i in range(per_split)]
  caption = {r[2]: r[3] for r in rows}
  videos = [{"video_id": v, "split": "train" if v in train else "test", "id": int(v[5:]), "category": 0, "url": "",
             "start time": 0.0, "end time": 15.0} for v in train + test_ids]
  sentences = [{"caption": caption[o], "video_id": v, "sen_id": i} for i, (v, o) in enumerate(zip(train, others))]
  sentences += [{"caption": caption[v], "video_id": v, "sen_id": len(sentences) + i} for i, v in enumerate(test_ids)]
  (root / "MSRVTT_data.json").write_text(json.dumps({"videos": videos, "sentences": sentences}))
  (root / "train_list_jsfusion.txt").write_text("".join(f"{v}\n" for v in train))
  for v in train:
    placeholders.write_clip(root / "videos" / f"{v}.mp4", v, 15.0)
  return {"MSRVTT_data.json": str(root / "MSRVTT_data.json"),
          "train_list_jsfusion.txt": str(root / "train_list_jsfusion.txt")}


def build_user_data(root: Path, genstate: dict | None, per_split: int = PER_SPLIT,
                    sections: tuple[str, ...] | None = None) -> dict:
  """{guide section: (store, {file name in the guide: path here})}: placeholder videos for `per_split` videos of
  each split of the published files, one store per dataset prepared as the guide's step 1 does (tiny VideoPrism);
  `genstate`: a user's own triplets ({"videos", "test_annotations", "train_annotations"}; None: no GenState);
  `sections`: only these (None: every one)."""
  yc = {"youcookii_annotations_trainval.json": str(SHARED / "youcook2" / "youcookii_annotations_trainval.json")}
  coin = {f: str(SHARED / "coin" / f) for f in ("coin_train_70.json", "coin_test_30.json")}
  an = {"val_1.json": str(SHARED / "activitynet_captions" / "val_1.json"),
        "train.json": str(SHARED / "activitynet_captions" / "train_modified.json")}  # PDVC's name for train.json
  # No DiDeMo training file here: the validation file stands in under the training file's name (the readers take a
  # DiDeMo file's split from its name, and refuse val_data.json asked for as training data).
  (root / "didemo").mkdir(parents=True, exist_ok=True)
  shutil.copyfile(SHARED / "didemo" / "val_data.json", root / "didemo" / "train_data.json")
  dd = {"test_data.json": str(SHARED / "didemo" / "test_data.json"),
        "train_data.json": str(root / "didemo" / "train_data.json")}
  ms = {"MSRVTT_JSFUSION_test.csv": str(SHARED / "msrvtt" / "MSRVTT_JSFUSION_test.csv")}
  table = {"YouCook2": ("youcook2", yc, None), "COIN": ("coin", coin, None),
           "ActivityNet Captions": ("activitynet", an, None), "DiDeMo": ("didemo", dd, None),
           "MSR-VTT": ("msrvtt", ms, None)}
  if genstate is not None:
    table["GenState"] = ("genstate", {"test.json": str(genstate["test_annotations"]),
                                      "train.json": str(genstate["train_annotations"])}, genstate["videos"])
  out = {}
  for title, (dataset, files, videos) in table.items():
    if sections is not None and title not in sections:
      continue
    d = root / dataset
    written = []
    if videos is None:
      videos = d / "videos"
      for f in dict.fromkeys(files.values()):
        written += placeholders.write_videos(dataset, f, videos, per_split)
    if dataset == "msrvtt":  # the test CSV's videos written above, then the training videos the file names
      files |= _write_msrvtt_training(d, sorted(written), per_split)
    release = [p for name, p in files.items() if not name.endswith(".txt")]  # step 1 takes the annotation files
    prep = load_config(ROOT / "configs/prepare.py:smoke")
    prep = with_values(prep, {"dataset": dataset, "data.videos": str(videos),
                              "data.annotations": ",".join(dict.fromkeys(release))})
    if not (d / "prep" / "results.json").exists():
      prepared = main.run(prep, str(d / "prep"))
      assert prepared["metrics"]["prepare"]["valid_videos"] >= per_split and prepared["synthetic"] is True
    out[title] = (str(d / "prep" / "features"), files)
  return out


@pytest.fixture(scope="module")
def user_data(tmp_path_factory, real_path):
  _, corpus = real_path("corpus")  # GenState: a user's own triplets (the rendered corpus's clips and metadata)
  return build_user_data(tmp_path_factory.mktemp("user"), corpus["genstate"])


def test_the_guide_has_every_datasets_commands():
  sections = guide_commands()
  assert {"YouCook2", "COIN", "MSR-VTT", "DiDeMo", "ActivityNet Captions", "GenState"} <= set(sections)
  assert sum(len(v) for v in sections.values()) >= 12


@pytest.mark.parametrize("section", ["YouCook2", "COIN", "MSR-VTT", "DiDeMo", "ActivityNet Captions", "GenState"])
def test_every_guide_command_fits_the_published_files(section, user_data, tmp_path):
  store, files = user_data[section]
  checked = 0
  for argv in guide_commands()[section]:
    if argv[0] != "$M":
      continue  # `vidjax.search` reads the stack's index: the stack run whole is test_real_path's
    spec, config = _config(argv, {**files, "$S": store})
    assert config.data.features == store, (section, spec)
    workdir = tmp_path / Path(spec).stem
    out = main.run(config, str(workdir), check=True)
    if "check" in out:  # stopped before training: everything fits (or was clipped) and is recorded
      assert json.loads((workdir / "check.json").read_text()) == json.loads(json.dumps(out))
      for key, (asked, used) in out["clipped"].items():  # the plain value asked, what runs instead
        ran = out["config"]
        for part in key.split("."):
          ran = ran[part]
        as_json = lambda v: json.loads(json.dumps(v))  # noqa: E731  (a tuple is recorded as a list)
        assert as_json(get_key(config, key)) == asked and as_json(ran) == used != asked, key
      expect = EXPECTED_CLIPS.get(Path(spec).stem, set())
      assert expect <= set(out["clipped"]), (spec, out["clipped"])
      if "data" in out["config"] and "identity_rule" in out["config"]["data"] and section == "YouCook2":
        assert out["config"]["data"]["identity_rule"] == "caption_similarity"  # the paper's rule, not a world's
    else:  # nothing to fit: it ran whole (retrieval)
      assert out["path"] == "real" and out["synthetic"] is True
      assert out["skipped_videos"]["count"] > 0  # the published file names far more videos than are here
    checked += 1
  assert checked >= 1
