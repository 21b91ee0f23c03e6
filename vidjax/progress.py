"""Progress reporting for long loops: a tqdm bar on a terminal, plain lines in log files.

When stderr is not a terminal (a log file, a TPU VM's nohup output, CI), a tqdm bar writes a
carriage-return update many times a second, which fills logs with unreadable lines. `bar` then
prints one plain line every `interval` seconds instead (and one at the end).
"""
from __future__ import annotations

import sys
import time
from typing import Any


class _Lines:
  """The tqdm subset vidjax uses (update, set_postfix, close, context manager), as plain lines."""

  def __init__(self, total: int | None, desc: str, unit: str, initial: int, interval: float, file):
    self.total, self.desc, self.unit, self.n = total, desc, unit, initial
    self.interval, self.file = interval, file
    self._start = self._last = time.monotonic()
    self._start_n = initial
    self._postfix = ""

  def _line(self) -> str:
    elapsed = max(time.monotonic() - self._start, 1e-9)
    rate = (self.n - self._start_n) / elapsed
    of = f"/{self.total}" if self.total else ""
    eta = ""
    if self.total and rate > 0:
      eta = f", eta {max(self.total - self.n, 0) / rate:.0f}s"
    return f"{self.desc}: {self.n}{of} {self.unit}s ({rate:.1f} {self.unit}/s{eta}){self._postfix}"

  def update(self, n: int = 1) -> None:
    self.n += n
    now = time.monotonic()
    if now - self._last >= self.interval:
      self._last = now
      print(self._line(), file=self.file, flush=True)

  def set_postfix(self, **values: Any) -> None:
    self._postfix = "  " + " ".join(f"{k}={v}" for k, v in values.items())

  def close(self) -> None:
    if self.n != self._start_n:
      print(self._line() + " done", file=self.file, flush=True)
      self._start_n = self.n

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()


class _Off:
  def update(self, n: int = 1) -> None:
    pass

  def set_postfix(self, **values: Any) -> None:
    pass

  def close(self) -> None:
    pass

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    pass


def bar(total: int | None, desc: str, unit: str = "it", *, disable: bool = False, initial: int = 0,
        interval: float = 10.0, file=None, **tqdm_kwargs):
  """A progress reporter: tqdm on a terminal, a plain line every `interval` seconds otherwise."""
  file = sys.stderr if file is None else file
  if disable:
    return _Off()
  if hasattr(file, "isatty") and file.isatty():
    import tqdm  # pylint: disable=g-import-not-at-top
    return tqdm.tqdm(total=total, desc=desc, unit=unit, initial=initial, file=file, dynamic_ncols=True,
                     **tqdm_kwargs)
  return _Lines(total, desc, unit, initial, interval, file)
