"""Which image formats ``--plot`` writes (the one its file suffix names), and writing one after a run.

Kept apart from the plotting modules (which import matplotlib, slow) so that the commands can check
``--plot`` before a long run, not after it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

# Formats matplotlib's Agg canvas writes here (jpg and webp through Pillow, a matplotlib dependency).
PLOT_FORMATS = ("png", "svg", "pdf", "jpg", "jpeg", "webp")


def image_format(path: str | Path) -> str:
    """``'out.JPG'`` -> ``'jpg'``; ``ValueError`` (one line, listing the formats) for any other suffix."""
    suffix = Path(path).suffix.lower().lstrip(".")
    supported = ", ".join(f".{f}" for f in PLOT_FORMATS)
    if not suffix:
        raise ValueError(f"{path} has no file suffix to say the image format; use one of {supported}")
    if suffix not in PLOT_FORMATS:
        raise ValueError(f"{path}: cannot write .{suffix} images; use one of {supported}")
    return suffix


def check_plot_path(path: str | Path) -> str:
    """The image format of ``path``, after checking it can be written: ``ValueError`` otherwise.

    A missing parent directory is fine (the plot creates it), but not a parent that is a file, an
    existing directory in the way, or a directory this process may not write to.
    """
    p = Path(path)
    if p.is_dir():
        raise ValueError(f"{p} is a directory; give a file name such as {p / 'plot.png'}")
    fmt = image_format(p)
    parent = p.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise ValueError(f"cannot write {p}: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"cannot write {p}: no permission to write in {parent}")
    return fmt


def write_plot(draw: Callable[[], None], path: str | Path, command: str, *, quiet: bool) -> int:
    """Draw a plot once the results are out: a plot that cannot be written (checked before the run, but a disk can
    fill or a directory go away since) costs the picture, not the run's table. The exit status: 1 (and one line)
    when it could not be written, else 0 (and a line saying where, unless ``quiet``)."""
    try:
        draw()
    except OSError as exc:
        print(f"predictive-autoscaler {command}: error: --plot: cannot write {path}: {exc.strerror or exc}",
              file=sys.stderr)
        return 1
    if not quiet:
        print(f"Plot written to {path}")
    return 0
