"""The notice latch: said once per transition, retried until it lands, resumable, forgettable."""

from __future__ import annotations

from functools import partial

from autoscaler.runtime.notices import Notices


class Teller:
    """Records what was said; ``fail`` makes the next saying not land."""

    def __init__(self) -> None:
        self.said: list[str] = []
        self.fail = False

    def __call__(self, what: str) -> bool:
        if self.fail:
            self.fail = False
            return False
        self.said.append(what)
        return True


def test_a_state_is_said_once_per_transition_and_the_quiet_state_needs_no_word() -> None:
    notices, teller = Notices(), Teller()
    for state in (False, False, True, True, True, False, False, True):
        notices.tell("outage", state, partial(teller, "down" if state else "up"), quiet=False)
    assert teller.said == ["down", "up", "down"]


def test_a_saying_that_did_not_land_is_tried_again_and_only_then_remembered() -> None:
    notices, teller = Notices(), Teller()
    teller.fail = True
    assert not notices.tell("gpus", True, lambda: teller("short"))
    assert notices.told("gpus") is None
    assert notices.tell("gpus", True, lambda: teller("short"))
    assert not notices.tell("gpus", True, lambda: teller("short"))
    assert teller.said == ["short"]


def test_a_resumed_state_is_not_said_again_and_a_forgotten_one_is() -> None:
    notices, teller = Notices(), Teller()
    notices.set("slo", False)  # told by the controller before a restart
    notices.tell("slo", False, lambda: teller("unreachable"), quiet=True)
    assert teller.said == []
    notices.tell("slo", True, lambda: teller("reachable"), quiet=True)
    notices.forget("slo")
    notices.tell("slo", True, lambda: teller("reachable"), quiet=True)  # quiet again: nothing to say
    notices.tell("slo", False, lambda: teller("unreachable"), quiet=True)
    assert teller.said == ["reachable", "unreachable"]


def test_the_states_a_status_can_carry_are_given_for_the_subjects_asked() -> None:
    notices = Notices()
    notices.set("outage", True)
    notices.set("rollout", "held")
    notices.set("contention", ("llama-cpu",))  # not a state a status carries here
    notices.once(("expired", "gang"), lambda: None)
    assert notices.states(("outage", "rollout", "contention", "gpus")) == {"outage": True, "rollout": "held"}


def test_once_says_a_note_the_first_time_until_forgotten() -> None:
    notices, teller = Notices(), Teller()
    assert [notices.once("pool unpriced", lambda: teller("note")) for _ in range(3)] == [True, False, False]
    notices.forget("pool unpriced")
    assert notices.once("pool unpriced", lambda: teller("note"))
    assert teller.said == ["note", "note"]
