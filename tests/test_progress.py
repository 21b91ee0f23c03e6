"""Tests for vidjax/progress.py: plain lines, not carriage returns, when the output is not a terminal."""
import io

from vidjax import progress


def test_non_terminal_output_gets_plain_lines():
  out = io.StringIO()
  with progress.bar(5, "train", "step", file=out, interval=0.0) as bar:
    for _ in range(5):
      bar.update(1)
    bar.set_postfix(loss="0.5")
  text = out.getvalue()
  assert "\r" not in text
  lines = text.splitlines()
  assert len(lines) == 6 and lines[0].startswith("train: 1/5 steps")
  assert lines[-1].startswith("train: 5/5 steps") and lines[-1].endswith("loss=0.5 done")


def test_interval_limits_the_lines_and_disable_prints_nothing():
  out = io.StringIO()
  bar = progress.bar(1000, "extract", "clip", file=out, interval=3600.0)
  for _ in range(1000):
    bar.update(1)
  bar.close()
  assert out.getvalue().count("\n") == 1  # only the final line
  quiet = io.StringIO()
  off = progress.bar(10, "x", file=quiet, disable=True)
  off.update(3)
  off.close()
  assert quiet.getvalue() == ""
