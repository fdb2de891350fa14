"""The configuration in force while the controller runs: the file re-read on each tick, swapped in only when valid.

Why it exists: the controller never crashes on a typo. ``ConfigStore`` re-reads the file on each tick and swaps in a
new ``Config`` only when it validates; a broken edit is reported and the last good configuration stays in force.

A ConfigMap mounted as a directory exposes ``config.yaml`` as a symlink chain
(``config.yaml -> ..data/config.yaml``, ``..data -> ..2024_01_01_00_00_00.123``) that the kubelet swaps
atomically. The store re-opens the path on every check, following the symlinks, and compares content hashes, so a
swap is seen even when the new target has an older mtime or the same size.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from pathlib import Path

from autoscaler.config.parser import decode_config, parse_config_text, read_config_file
from autoscaler.config.schema import Config, ConfigError

log = logging.getLogger("autoscaler.config")


# ---------------------------------------------------------------------------------------------- reload


class ConfigStore:
    """The configuration in force, re-read from disk when it changes.

    The first load must succeed (``ConfigError`` otherwise: a controller without any valid
    configuration should not start). Afterwards ``maybe_reload`` swaps in a changed file only when
    it validates; otherwise the last good ``Config`` stays, ``last_error`` says why, and the same
    broken content is not re-parsed or re-reported until it changes again.
    """

    def __init__(self, path: str | Path, *, on_error: Callable[[ConfigError], None] | None = None) -> None:
        self.path = Path(path)
        self._on_error = on_error
        file, raw = read_config_file(self.path)
        self._config = parse_config_text(decode_config(file, raw), str(file))
        self._digest = hashlib.sha256(raw).hexdigest()
        self._bad_digest: str | None = None
        self.last_error: ConfigError | None = None
        self.generation = 1
        self.reload_failures = 0
        self._log_warnings()

    @property
    def digest(self) -> str:
        """SHA-256 of the file content currently in force (for a status metric or log line)."""
        return self._digest

    def current(self) -> Config:
        return self._config

    def maybe_reload(self) -> bool:
        """Re-read the file; ``True`` when a valid configuration that differs from the one in force was swapped in.

        The path is re-opened and its content hashed on every call (a few kilobytes per tick) rather than
        trusting inode/mtime/size: opening follows the ConfigMap symlink chain to whatever target is
        current, a same-size edit within the file system's mtime resolution is still seen, and a swap to
        identical content (a ConfigMap re-sync) or a comment-only edit is a no-op.
        """
        try:
            file, raw = read_config_file(self.path)
        except ConfigError as exc:
            self._fail(exc, digest=f"unreadable:{exc}")
            return False
        digest = hashlib.sha256(raw).hexdigest()
        if digest == self._digest:
            if self.last_error is not None:  # reverted to the content in force: nothing is wrong any more
                self.last_error = None
                self._bad_digest = None
            return False
        if digest == self._bad_digest:
            return False
        try:
            config = parse_config_text(decode_config(file, raw), str(file))
        except ConfigError as exc:
            self._fail(exc, digest=digest)
            return False
        changed = config != self._config
        self._digest = digest
        self._bad_digest = None
        self.last_error = None
        if not changed:
            log.info("configuration file %s changed without effect on the settings", file)
            return False
        self._config = config
        self.generation += 1
        log.info("configuration reloaded from %s (generation %d)", file, self.generation)
        self._log_warnings()
        return True

    def _fail(self, exc: ConfigError, digest: str) -> None:
        if digest == self._bad_digest:
            return
        self._bad_digest = digest
        self.last_error = exc
        self.reload_failures += 1
        log.error("configuration not reloaded, keeping the last good one: %s", exc)
        if self._on_error is not None:
            self._on_error(exc)

    def _log_warnings(self) -> None:
        for warning in self._config.warnings:
            log.warning("config: %s", warning)

