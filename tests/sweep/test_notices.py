"""``notices.Waiting``: what a sweep with nothing of its own to run says while it waits for other
orchestrators' trials, on a clock the test keeps. Pure: a study's trials as the records hold them."""

from __future__ import annotations

from types import SimpleNamespace

from orchestrator.sweep.notices import ELSEWHERE_S, Waiting


class Study:
    """The trials' owners, as ``get_trials`` gives them (``TrialRecord.orchestrator``)."""

    def __init__(self, owners: list[str]) -> None:
        self.trials = [SimpleNamespace(number=n, user_attrs={"orchestrator": o}, system_attrs={})
                       for n, o in enumerate(owners)]

    def get_trials(self, deepcopy: bool = False) -> list[SimpleNamespace]:
        return self.trials


def test_each_trial_is_said_once_after_the_wait_and_a_trial_of_its_own_never() -> None:
    said: list[str] = []
    w = Waiting(60.0, Study(["me:1", "b:2", "b:2", "c:3"]), owner="me:1")
    w.say(100.0, [], [1, 2], said.append)
    w.say(100.0 + ELSEWHERE_S - 0.5, [], [1, 2], said.append)
    assert said == []  # a normal end: the others' last trials, not yet worth a line
    w.say(100.0 + ELSEWHERE_S, [], [1, 2], said.append)
    assert said == [f"orchestrate: nothing left to run here; waiting {ELSEWHERE_S:.0f} s so far for trial(s) #1 (b:2), "
                    "#2 (b:2) of other orchestrators; one whose orchestrator died is run here once its heartbeat is "
                    "search.grace_period_s=60 s old"]
    w.say(120.0, [], [2], said.append)  # #1 ended: the rest is not said again
    w.say(121.0, [], [0, 2, 3], said.append)  # #0 is its own (a view from before it told it): left out
    assert len(said) == 2 and "for trial(s) #3 (c:3) of other" in said[1], said


def test_a_wait_after_trials_of_its_own_is_a_new_one_and_strays_are_said_at_once() -> None:
    said: list[str] = []
    w = Waiting(4.0, Study(["a:1", "b:2"]), owner="a:1")
    w.say(0.0, [], [1], said.append)
    w.since = None  # the loop: trials of its own ran meanwhile
    w.say(ELSEWHERE_S + 1.0, [], [1], said.append)
    assert said == []  # this wait began just now
    w.say(ELSEWHERE_S + 1.0, [0], [1], said.append)
    assert len(said) == 1 and said[0].startswith("orchestrate: waiting for trial 0, left RUNNING without a configuration")
