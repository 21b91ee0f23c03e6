"""Reader for the CrossTask release (Zhukov et al. 2019), a CVR source for CAST §3.1 / App. B.

Release layout (see `shared/refs/crosstask_format.md`)::

    <root>/tasks_primary.txt       blocks of 5 lines separated by blank lines:
                                   task id / task name / URL / number of steps / comma-separated steps
    <root>/tasks_related.txt       same format (optional; related tasks have no step annotations)
    <root>/videos.csv              task_id,youtube_id,url   (no header)
    <root>/videos_val.csv          same (optional)
    <root>/annotations/<task_id>_<youtube_id>.csv
                                   step,start,end per line; step is the 1-based index into the
                                   task's step list; lines in temporal order; steps may repeat

Only annotated videos are returned (an annotation file with at least one line): clip text is the
step name, task the task id and step the 1-based step index as a string. CAST splits CrossTask
videos 80/20 with seed 42 (App. B); `read_crosstask` labels each video with that split
('train' / 'test'), computed by `types.split_by_video` over the annotated video ids, so the
`split` argument and the builder's `build_crosstask_cvr` agree.
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from vidjax.data.annotations import types

SPLIT_SEED = 42
TEST_FRACTION = 0.2


def read_crosstask_tasks(path: str | os.PathLike) -> dict[str, tuple[str, tuple[str, ...]]]:
  """Parses `tasks_primary.txt` / `tasks_related.txt`: {task_id: (task name, step names)}."""
  path = Path(path)
  lines = types.read_lines(path, "CrossTask task file")
  types.refuse_other_text(path, ("crosstask_tasks",), "a CrossTask task file (blocks of 5 lines: id, name, url, "
                          "number of steps, steps)")
  blocks, block, first_line = [], [], 1
  for n, line in enumerate(lines + [""], start=1):
    if line.strip():
      if not block:
        first_line = n
      block.append(line.strip())
    elif block:
      blocks.append((first_line, block))
      block = []
  tasks = {}
  for first_line, block in blocks:
    where = f"task block at line {first_line}"
    if len(block) != 5:
      types.fail(path, where, f"expected 5 lines (id, name, url, number of steps, steps), got {len(block)}")
    task_id, name, _, n_steps, steps_line = block
    if not task_id.isdigit():
      types.fail(path, where, f"task id must be an integer, got {task_id!r}")
    if not n_steps.isdigit():
      types.fail(path, where, f"number of steps must be an integer, got {n_steps!r}")
    steps = tuple(s.strip() for s in steps_line.split(","))
    if len(steps) != int(n_steps) or not all(steps):
      types.fail(path, where, f"declares {n_steps} steps but the step line has {len(steps)} "
                 f"comma-separated names (empty names not allowed): {steps_line!r}")
    for step in steps:
      types.clean_text(step, path, where, "a step name", "step name")
    types.clean_text(name, path, where, "the task name", "task name")
    if task_id in tasks:
      types.fail(path, where, f"task id {task_id} is defined twice")
    tasks[task_id] = (name, steps)
  if not tasks:
    types.fail(path, "file", "expected at least one task block, the file has none")
  return tasks


def _read_video_list(path: Path) -> dict[str, str]:
  """{youtube_id: task_id} from `videos.csv`."""
  lines = types.read_lines(path, "CrossTask video list")
  types.refuse_other_text(path, ("crosstask_videos",), "a CrossTask video list ('task_id,youtube_id,url' lines)")
  listed = {}
  for n, row in types.csv_rows(path, lines):
    if len(row) != 3 or not row[0].strip().isdigit():
      types.fail(path, f"line {n}", f"expected 'task_id,youtube_id,url', got {','.join(row)!r}")
    task_id = row[0].strip()
    video_id = types.clean_id(row[1], path, f"line {n}", "the youtube id", "video id")
    if listed.get(video_id, task_id) != task_id:
      types.fail(path, f"line {n}", f"video {video_id!r} listed under tasks {listed[video_id]} and {task_id}")
    listed[video_id] = task_id
  return listed


def _parse_annotation(path: Path, steps: tuple[str, ...]) -> list[tuple[float, float, str, str]]:
  segments = []
  for n, row in types.csv_rows(path, types.read_lines(path, "CrossTask annotation")):
    where = f"line {n}"
    if len(row) != 3:
      types.fail(path, where, f"expected 'step,start,end', got {','.join(row)!r}")
    try:
      step_f, start, end = (float(x) for x in row)
    except ValueError:
      types.fail(path, where, f"expected numbers 'step,start,end', got {','.join(row)!r}")
    if not step_f.is_integer() or not 1 <= step_f <= len(steps):
      types.fail(path, where, f"unknown step index {row[0].strip()!r}: the task has steps 1..{len(steps)}")
    start, end = types.parse_segment([start, end], path, where)
    step = int(step_f)
    segments.append((start, end, steps[step - 1], str(step)))
  return segments


def read_crosstask(root: str | os.PathLike, split: str | None = None, *,
                   split_seed: int = SPLIT_SEED, test_fraction: float = TEST_FRACTION) -> list[types.Video]:
  """Reads the annotated CrossTask videos; returns them sorted by id.

  Args:
    root: the release folder (`tasks_primary.txt`, `videos.csv`, `annotations/`).
    split: 'train' | 'test' | None (all); videos carry the 80/20 seed-42 split label.
    split_seed, test_fraction: the video-level split (CAST App. B: 42 and 0.2).

  Raises:
    ValueError: naming the file, the line and what was expected, on malformed input.
  """
  types.check_split_arg(split, ("train", "test"), "read_crosstask")
  root = Path(root)
  if root.is_file():
    what = types.sniff(root)
    types.fail(root, "file", "expected the CrossTask release folder (tasks_primary.txt, videos.csv, annotations/), "
               "got a file" + (f"; this looks like {types.FORMATS[what]}" if what else ""))
  tasks = read_crosstask_tasks(root / "tasks_primary.txt")
  if (root / "tasks_related.txt").exists():
    for task_id, value in read_crosstask_tasks(root / "tasks_related.txt").items():
      tasks.setdefault(task_id, value)
  if not (root / "videos.csv").exists():
    raise FileNotFoundError(f"CrossTask video list not found: {root / 'videos.csv'}")
  listed = _read_video_list(root / "videos.csv")
  if (root / "videos_val.csv").exists():
    for video_id, task_id in _read_video_list(root / "videos_val.csv").items():
      if listed.setdefault(video_id, task_id) != task_id:
        types.fail(root / "videos_val.csv", f"video {video_id!r}",
                   f"listed under task {task_id} but videos.csv has task {listed[video_id]}")
  ann_dir = root / "annotations"
  if not ann_dir.is_dir():
    raise FileNotFoundError(f"CrossTask annotation folder not found: {ann_dir}")
  videos, files = {}, {}
  # Every csv file, whatever the case of its suffix ("A.CSV" is a csv file too: a case-sensitive match dropped it).
  for path in sorted(p for p in ann_dir.iterdir() if p.suffix.lower() == ".csv"):
    # YouTube ids may contain '_', task ids never do: split at the first one.
    task_id, sep, video_id = path.stem.partition("_")
    if not sep or not task_id.isdigit() or not video_id:
      types.fail(path, "file name", "expected '<task_id>_<youtube_id>.csv'")
    if task_id not in tasks:
      types.fail(path, "file name", f"task {task_id} is not defined in tasks_primary.txt / tasks_related.txt")
    if listed.get(video_id, task_id) != task_id:
      types.fail(path, "file name", f"video {video_id!r} is listed under task {listed[video_id]} in videos.csv")
    if video_id in files:
      types.fail(path, "file name", f"video {video_id!r} is annotated twice (also in {files[video_id].name})")
    files[video_id] = path
    segments = _parse_annotation(path, tasks[task_id][1])
    if segments:
      videos[video_id] = (task_id, segments)
  if not videos:
    types.fail(ann_dir, "folder", "expected at least one annotation file '<task_id>_<youtube_id>.csv' with a "
               "'step,start,end' line, found none")
  all_videos = [types.make_video(v, t, "", s) for v, (t, s) in sorted(videos.items())]
  _, test = types.split_by_video(all_videos, test_fraction, split_seed)
  test_ids = {v.video_id for v in test}
  out = []
  for v in all_videos:
    label = "test" if v.video_id in test_ids else "train"
    if split is None or split == label:
      out.append(dataclasses.replace(v, split=label))
  return out
