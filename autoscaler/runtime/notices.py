"""Say a thing once per transition: the one latch behind every Event, log line and note the controller repeats no more.

Why it exists: a controller that ticks every 30 s must not post the same Event every tick (an outage, a shortage of
GPUs, a rollout holding a scale-down, a capacity not learned), yet it must not lose one either: an Event that failed
to post is retried on the next tick, and the state a restarted controller resumes from may say what was told
already. Each of these used to be a flag of its own with the same few lines around it, and the copies differed in
small ways (one set the flag before it knew the Event landed). ``Notices`` is that rule, once.

A *subject* (any hashable: ``"outage"``, a gang's key, a message) has a last told *state*. ``tell`` says the new state
when it differs from the last told one (the ``quiet`` state when nothing was told: the state that needs no word),
and remembers it only once ``say`` reports that it landed.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable


class Notices:
    """The last told state of each subject (see the module docstring)."""

    def __init__(self) -> None:
        self._told: dict[Hashable, object] = {}

    def told(self, subject: Hashable, quiet: object = None) -> object:
        """The state last told of ``subject`` (``quiet`` when none was)."""
        return self._told.get(subject, quiet)

    def tell(self, subject: Hashable, state: object, say: Callable[[], bool], *, quiet: object = None) -> bool:
        """Call ``say`` when ``state`` differs from what was last told of ``subject`` (``quiet`` before anything
        was); True when it was said and landed (then it is remembered), False when there was nothing new to say or
        it did not land (then it is tried again next time)."""
        if self._told.get(subject, quiet) == state:
            return False
        if not say():
            return False
        self._told[subject] = state
        return True

    def once(self, subject: Hashable, say: Callable[[], object]) -> bool:
        """Call ``say`` the first time ``subject`` is seen and never again until it is forgotten (a log line or a
        count, which cannot fail to land); True when it was said now."""
        if subject in self._told:
            return False
        say()
        self._told[subject] = True
        return True

    def states(self, subjects: tuple[str, ...]) -> dict[str, bool | str]:
        """The told state of each of ``subjects`` that has one a status can carry (true/false or a word), for a
        restarted controller to ``set`` again."""
        return {s: v for s in subjects if isinstance(v := self._told.get(s), (bool, str))}

    def set(self, subject: Hashable, state: object) -> None:
        """Record ``state`` as told without saying it (it was told by someone else: a resumed status)."""
        self._told[subject] = state

    def forget(self, subject: Hashable) -> None:
        """Nothing told of ``subject`` any more: the next state other than the quiet one is said again."""
        self._told.pop(subject, None)
