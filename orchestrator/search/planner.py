"""The ``auto`` search: which configuration of a finite space to measure next, and when no
unmeasured one is likely to beat the best measured by more than the band (2%).

What it knows before any trial, and how it uses it:

- **Memory** (``feasibility``): a configuration that needs at least as much memory as one that ran
  out does not fit; peak memory is linear in batch size with the rest fixed, so two measured
  peaks and the limit predict the rest of a batch column.
- **Throughput** (``surrogate``): the log of the objective is a linear function of what is known
  to matter (``priors.PRIORS``: more batch per step is faster, checkpointing is slower, half
  precision is faster on most GPU work), each effect with a spread the measurements overrule,
  plus a Gaussian process for everything else, parameters it knows nothing about included.
- **Noise** (``remeasure``): each measurement's own spread (``throughput_ci95``); a measured
  configuration whose spread lets it beat the best by more than the band is a rival, counted in
  the stop's chance and, with ``trial.repeats: auto``, measured again alternately with the best.

The priors order the search; measurements decide its stop. The first trials bisect the memory
boundary of the most promising batch column (``boundary``). Then each trial is the one with the
highest chance to fit and beat the best by more than the band. Every value of a searched parameter
(batch size aside; for another numeric one, values between two measured ones are interpolated)
gets one look before the sweep may end, unless no configuration with it can fit: the best measured
configuration with that value instead (only that parameter differs), once the likeliest
candidate's chance is below ``COVER_BELOW``, and always before the stop; a value known to cost
much (``cost.COSTLY``: compile) is measured by that look only. The sweep ends when the chance that
some configuration left (not measured, not running, not proven too large) beats the best measured
by more than ``band`` falls below ``STOP_CHANCE`` (sampled from the model's joint posterior); the
stop line names each value never measured and what the model predicts for it, and says where the
search could not tell its best from a rival (``remeasure``). With trials in flight (several
slots), each proposal adds what those will not, and a verdict they cannot change ends them (``flight``).
Pure: the proposer calls ``Planner.decide`` with what the study holds.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from orchestrator.outcome import NOT_FITTING, Status
from orchestrator.search import cost, flight
from orchestrator.search.boundary import Boundary
from orchestrator.search import surrogate as S
from orchestrator.search.feasibility import FitIndex, Observed, fit_probabilities, scaling_dimension
from orchestrator.keys import config_key, value_keys_of
from orchestrator.search.mixture import Model
from orchestrator.search.remeasure import Measured, Measurements, Parts, describe, process_values
from orchestrator.search.priors import NOISE_FLOOR, THROUGHPUT, encode, measured_noise, ordered, values_of
from orchestrator.search.verdict import Decision, Verdict, measured_values, reason, unmeasured_note, unseen
from orchestrator.metrics import DURATION_S
from orchestrator.store.record import attrs_of, metrics_of, status_of

STOP_CHANCE = 0.05
"""The sweep ends when some configuration left beats the best by more than the band with at most
this probability."""
COVER_BELOW = 0.3
"""Below this chance for the likeliest configuration left (to fit and beat the best by more than
the band), a parameter value never measured gets its one look (and always before the stop)."""
REFIT_ALWAYS = 40
PAIR_FITS = 0.2
"""A paired look this unlikely to fit goes to the largest batch of it that is likelier (``_paired``)."""
TOP = 200
"""Candidates sampled jointly for the stop rule; the rest are bounded one by one (union bound)."""
class Planner:
    def __init__(self, configs: list[dict[str, Any]], searched: dict[str, Any], metric: str, direction: str,
                 device: str, order: dict[str, Any], band: float = 0.02, cap_gib: float | None = None,
                 native_half: frozenset[str] | None = None, again: bool = True, steps: int = 0) -> None:
        """``configs``: every configuration of the space, in spec order; ``searched``: the plan's
        dimensions (``space.Plan.searched``); ``device``: the resolved device (``swept``: several);
        ``native_half``: on a CPU, the half precisions it has instructions for (None: unknown);
        ``again``: whether a rival closer than its spread is measured again (``trial.repeats: auto``);
        ``steps``: the warm-up and measured steps of a trial (``cost.predictor``)."""
        self.again, self.steps = again, steps
        self.configs, self.keys = configs, [config_key(c) for c in configs]
        self.index = {k: i for i, k in enumerate(self.keys)}
        self.metric, self.maximize = metric, direction == "maximize"
        self.order, self.band, self.cap_gib = order, band, cap_gib
        self.threshold = -math.log(1.0 - band)
        names = list(dict.fromkeys(n for c in configs for n in c))
        values = {n: values_of(configs, n) for n in names}
        self.searched = {n for n in names if len(values[n]) > 1}
        """The parameters whose values the stop rule needs measured (those that vary here)."""
        self.ordered = {n for n in self.searched if ordered(values[n])}
        """Of those, the numeric ones: a value between two measured ones counts as measured (the
        model interpolates it from both sides), so only the ends need a look, not every value."""
        self.scaling = scaling_dimension(names, order, values)
        self.space, self.scaling_feature = encode(configs, names, values, metric, device if self.maximize else None,
                                                   self.scaling, native_half)
        self.noise_floor = NOISE_FLOOR.get(device, max(NOISE_FLOOR.values()))
        self._fitted: tuple[int, list[tuple[float, S.Hyper]]] | None = None
        self.values = values
        self.value_keys = value_keys_of(configs)  # per configuration, its (parameter, value key) pairs
        self.costly = cost.costly_pairs(self.value_keys, configs)
        """Values known to cost much (``cost.COSTLY``): measured by their look first."""
        self.boundary = Boundary(configs, self.keys, self.scaling, self.space, self.scaling_feature, order, values,
                                 down_first=device == "cpu",
                                 costly=[bool(self.costly.intersection(p)) for p in self.value_keys])
        """The first trials: the most promising batch column's memory boundary (``boundary``)."""
        self.fit_index = FitIndex(configs, order, self.scaling, self.keys, self.value_keys)
        self._seen = Measurements(self.noise_floor)
        """The measured configurations, read with the observations (``remeasure``)."""

    # -- what the study holds ---------------------------------------------------------------------
    def _observations(self, results: dict[str, Any]) -> tuple[dict[str, Observed], list[int], list[float]]:
        memory: dict[str, Observed] = {}
        idx, y = [], []
        seen = self._seen = Measurements(self.noise_floor)
        for key, t in results.items():
            if key not in self.index:
                continue
            status = status_of(t)
            record = attrs_of(t, (DURATION_S, "measurements", "processes", "repeat_metrics"))
            seconds = float(record.get(DURATION_S) or 0.0)
            seen.first_s += seconds
            if status in NOT_FITTING:
                memory[key] = Observed(False)
            elif status == Status.OK:
                metrics = metrics_of(t)
                memory[key] = Observed(True, metrics.get("peak_memory_gib"))
                value = t.values[0] if t.values else metrics.get(self.metric)
                if value is not None and value > 0:
                    i, processes = self.index[key], int(record.get("processes") or 1)
                    idx.append(i)
                    y.append(math.log(value) if self.maximize else -math.log(value))
                    seen.add(i, Measured(getattr(t, "number", 0), int(record.get("measurements") or 1), seconds), value,
                             measured_noise(metrics, self.metric, processes), processes)
                    seen.add_processes(process_values(record.get("repeat_metrics"), self.metric))
        return memory, idx, y

    def decide(self, results: dict[str, Any], in_flight: set[str], stop: bool = True, running: int | None = None,
               failed: frozenset[str] | set[str] = frozenset()) -> Decision:
        """The next configuration and the verdict; None when nothing left could fit or (``stop``) the verdict
        is done. ``running``: how many of ``in_flight`` run now; ``failed``: failed in this run (``taken``)."""
        self._running = len(in_flight) if running is None else running
        from threadpoolctl import threadpool_limits

        # The matrices are small (a few hundred rows at most): BLAS's threads only cost here, up to
        # 300x on a busy 2-core machine (a 120x120 solve: 77 ms against 0.25 ms on one thread).
        with threadpool_limits(1):
            return self._decide(results, in_flight, set(failed), stop)

    def _decide(self, results: dict[str, Any], in_flight: set[str], failed: set[str], stop: bool) -> Decision:
        memory, idx, y = self._observations(results)
        p_fit = np.array(fit_probabilities(self.configs, memory, self.order, self.scaling, self.cap_gib,
                                           self.fit_index))
        taken = in_flight | failed  # not to be run again now (a failure is no look at its values, though)
        left = [i for i, k in enumerate(self.keys) if k not in results and k not in taken]
        open_ = [i for i in left if p_fit[i] > 0.0]
        too_large = sum(1 for i in left if p_fit[i] < 0.05)
        probe = self.boundary.probe(p_fit, results, taken) if open_ else None
        measured = self._model(idx, y) if open_ or stop else None
        model = self._believed(measured, in_flight, p_fit)
        rivals = self._rivals(model, taken) if stop else []
        if not open_ and not rivals:
            errors = len(failed - results.keys()) + sum(status_of(t) not in NOT_FITTING + (Status.OK,) for t in results.values())
            return Decision(None, Verdict(True, 0.0, len(left), too_large, reason(
                0.0, len(left), too_large, self.band, nothing_left=True, failed=errors), exhausted=True))
        verdict = self._verdict(model, open_, rivals, p_fit, len(left), too_large, bisecting=probe is not None)
        if probe is not None:
            return Decision(self.configs[probe], verdict, "boundary")
        choices = flight.without(open_, self.value_keys, self._looking(idx, in_flight, costly=True))  # by a look
        if choices != open_ and model is not None and verdict.lead >= COVER_BELOW:
            verdict.lead = float(self._chances(model, open_, p_fit)[np.isin(open_, choices)].max(initial=0.0))
        if open_ and (verdict.done or verdict.lead < COVER_BELOW):
            unseen = self._unseen(idx, open_, in_flight, p_fit)
            if unseen:  # the priors alone may not end a sweep: one look at each value first
                verdict = Verdict(False, verdict.chance, verdict.left, verdict.too_large, lead=verdict.lead)
                avoid = self._looking(idx, set(), costly=True)  # a costly value is measured by its own look only
                looks = [(k[0], flight.without(g, self.value_keys, avoid - {k}) or g) for k, g in unseen.items() if g]
                if looks:
                    return Decision(self.configs[self._look(model, looks, p_fit, self._running)], verdict, "coverage")
                if stop and verdict.chance < STOP_CHANCE:
                    return Decision(None, verdict)  # the looks in flight may change the verdict
        if stop and verdict.done:
            verdict.reason += self._unmeasured_note(model, idx, p_fit)
            verdict.ends_running = self._ends(measured, open_, idx, in_flight, p_fit)
            if not verdict.ends_running and self.again and self._running and measured is not None and (spare := self._seen.spare(measured.incumbent, self._busy(taken))) is not None:  # rather than wait
                return Decision(self.configs[spare], Verdict(False, verdict.chance, verdict.left, verdict.too_large), "remeasure")
            return Decision(None, verdict)
        if not choices and not rivals:  # each one left waits for a look in flight
            return Decision(None, verdict)
        held = flight.hostage(self.fit_index.dominance, sorted(self._busy(in_flight)), p_fit) if in_flight else None
        if (predict := self._cost(model)) is not None:  # a first measurement of a value costs as a look may
            known = self._measured_values(idx)
            new = lambda pair: self._looked_for(pair[0]) and pair not in known  # noqa: E731
            choices = cost.first_looks(choices, self.value_keys, new, predict, p_fit >= 0.5, self._running)
        pick = self._best_candidate(model, choices + rivals, p_fit, held)
        if pick not in rivals:
            return Decision(self.configs[pick], verdict, "improvement")
        assert model is not None
        again = self._again(model, pick, taken)  # the likeliest to change the answer was measured
        if again is not None:
            return Decision(self.configs[again], verdict, "remeasure")
        if open_ and not (stop and self._verdict(model, open_, [], p_fit, len(left), too_large, False).done):
            pick = self._best_candidate(model, choices, p_fit, held) if choices else self._beside(model, open_, idx, in_flight, p_fit)  # type: ignore[assignment]  # None: wait for a look
            return Decision(None if pick is None else self.configs[pick], verdict, "improvement" if pick is not None else "")
        if stop or not open_:  # nothing unmeasured is likely to win, and the rival cannot be settled
            verdict.done, verdict.unsure = True, True
            verdict.reason = self._unsure(model, pick, verdict.chance, open_, rivals, p_fit) + self._unmeasured_note(model, idx, p_fit)
            verdict.ends_running = self._ends(measured, open_, idx, in_flight, p_fit, unsure=True)
        return Decision(None, verdict)

    # -- measuring again: where the best and a rival are closer than their spread (``remeasure``) -
    def _rivals(self, model: Model | None, in_flight: set[str]) -> list[int]:
        """Measured configurations other than the best, not in flight: each may still beat the best
        by more than the band, as far as its spread allows. None where no trial reported its spread."""
        no = model is None or self._seen.noise() is None
        return [] if no else self._seen.rivals(model.incumbent, self._busy(in_flight))  # type: ignore[union-attr]  # not no: the model is set

    def _again(self, model: Model, rival: int, in_flight: set[str]) -> int | None:
        """Which of the best and ``rival`` to measure again (the one measured less recently), or None
        where nothing is measured again (``trial.repeats`` a number, the allowance spent, ...)."""
        busy, gap = self._busy(in_flight), float(model.gap(model.incumbent, np.array([rival]))[0])
        return self._seen.again(model.incumbent, rival, gap, self.threshold, busy) if self.again else None

    def _unsure(self, model: Model, rival: int, chance: float, open_: list[int], rivals: list[int], p_fit: np.ndarray) -> str:
        best, c = model.incumbent, self.configs  # where the chance comes from: remeasure.Parts
        any_of = lambda at: self._verdict(model, at, [], p_fit, 0, 0, False).chance if at else 0.0  # noqa: E731
        parts = Parts.of(float(self._chances(model, [rival], p_fit)[0]), any_of, rivals, open_)
        line = self._seen.unsure((best, describe(c[best])), (rival, describe(c[rival])), chance, self.band, self.again, parts)
        top = self._seen.best(self.maximize)  # the answer reported; the model's own leader may differ under noise
        return line if top in (None, best) else line + (f"; the best measured, trial {self._seen.measured[top].number} ({describe(c[top])}), is the answer reported, but weighing each measurement's spread against its neighbours' the model puts trial {self._seen.measured[best].number} first")

    def _busy(self, in_flight: set[str]) -> set[int]:
        return {self.index[k] for k in in_flight if k in self.index}

    # -- evidence before the stop: every value measured once --------------------------------------
    def _measured_values(self, idx: list[int]) -> set[tuple[str, str]]:
        return measured_values(idx, self.configs, self.value_keys, self.ordered, self.values)

    def _unseen(self, idx: list[int], open_: list[int], in_flight: set[str],
                p_fit: np.ndarray) -> dict[tuple[str, str], list[int]]:
        """The values that still need their look (``verdict.unseen``)."""
        flying = {pair for k in in_flight if k in self.index for pair in self.value_keys[self.index[k]]}
        return unseen(open_, self.value_keys, self._measured_values(idx), flying, self._looked_for)

    def _look(self, model: Model | None, looks: list[tuple[str, list[int]]], p_fit: np.ndarray, beside: int = 0) -> int:
        """The one look to take: for each unseen value, the best measured configuration with that
        value instead (a paired comparison: only that parameter differs), else the configuration
        with the highest expected throughput counting an OOM as none, among those predicted to
        cost at most ``cost.LOOK_COST`` times the cheapest that likely fits; of those, the value with
        the highest upper bound first (the likeliest to change the answer)."""
        picks = []
        incumbent = self.configs[model.incumbent] if model is not None else None
        predict = self._cost(model)  # fitted once for every value's look
        for name, group in looks:
            if predict is not None:
                group = cost.affordable(group, predict(group), p_fit[group] >= 0.5, beside)
            g = np.array(group)
            if incumbent is not None:
                paired = self._paired(incumbent, name, group, p_fit)
                if paired in group:
                    picks.append((float(model.upper(model.incumbent, np.array([paired]))[0]), paired))  # type: ignore[union-attr]  # an incumbent comes from a model
                    continue
            mean = self.space.H[g] @ self.space.prior_mean if model is None else model.mean(g)
            best = int(g[int(np.argmax(mean + np.log(np.clip(p_fit[g], 1e-9, None))))])  # E[throughput], OOM as 0
            if model is None:
                picks.append((float(mean.max()), best))
            else:
                picks.append((float(model.upper(model.incumbent, np.array([best]))[0]), best))
        return max(picks, key=lambda p: p[0])[1]

    def _paired(self, incumbent: dict[str, Any], name: str, group: list[int], p_fit: np.ndarray) -> int | None:
        """The incumbent with ``name``'s unseen value instead. Where that is unlikely to fit
        (``PAIR_FITS``) and the value is a category (float32 needs up to twice bfloat16's memory),
        the largest batch of it that likely fits: only the batch differs, which the model knows.
        Not for a number such as accumulation: its memory model is cautious (the small BERT's best,
        2 micro-batches at batch 32, fits; the model gave it under 10%)."""
        paired = self.index.get(config_key({**incumbent, name: self.configs[group[0]][name]}))
        if paired not in group or name in self.ordered or self.scaling not in incumbent or p_fit[paired] >= PAIR_FITS:
            return paired
        top, rest = incumbent[self.scaling], {k: v for k, v in self.configs[paired].items() if k != self.scaling}
        below = [i for i in group if p_fit[i] >= PAIR_FITS and self.configs[i].get(self.scaling, top) < top
                 and {k: v for k, v in self.configs[i].items() if k != self.scaling} == rest]
        return max(below, key=lambda i: self.configs[i][self.scaling], default=paired)  # type: ignore[index]  # scaling is in incumbent (above)

    def _cost(self, model: Model | None) -> Any:
        """A trial's predicted seconds for configurations ``at`` (``cost.predictor``); None where the
        cost cannot be told (no throughput objective, no batch, too few durations)."""
        if model is None or self.scaling is None or not self.maximize or self.metric not in THROUGHPUT:
            return None
        costly = np.array([bool(self.costly.intersection(p)) for p in self.value_keys]) if self.costly else None
        return cost.predictor(model, self.configs, self.scaling, self._seen.durations(), costly, self.steps)

    def _unmeasured_note(self, model: Model | None, idx: list[int], p_fit: np.ndarray) -> str:
        """For the stop line: each searched value never measured, and what the model says of it."""
        return unmeasured_note(model, self.configs, self.value_keys, self.searched, self._measured_values(idx), p_fit)

    # -- the model --------------------------------------------------------------------------------
    def _model(self, idx: list[int], y: list[float]) -> Model | None:
        """The model of the measurements (nothing believed)."""
        if not idx:
            return None
        i, yc = np.array(idx), np.array(y) - float(np.mean(y))
        noise, counts = self._seen.noise(), np.array(self._seen.processes, dtype=float)
        floor = self.noise_floor if noise is None else 0.0  # measured spreads replace the device's floor
        members = self._members(i, yc, noise, floor, counts)
        model = Model(self.space, members, i, yc, noise, counts)
        model.incumbent, model.offset = idx[int(np.argmax(model.mean(i)))], float(np.mean(y))
        self._conditioned = (members, yc, noise, counts)
        return model

    def _believed(self, model: Model | None, in_flight: set[str], p_fit: np.ndarray) -> Model | None:
        at = flight.running(self.index, in_flight, p_fit)  # counted as measured at its predicted value
        return model if model is None or not len(at) else flight.believe(model, *self._conditioned, at)

    # -- trials in flight (``flight``) --------------------------------------------------------------
    def _looking(self, idx: list[int], in_flight: set[str], costly: bool = False) -> set[tuple[str, str]]:
        """The values being looked at by a configuration in flight (none before a first result);
        with ``costly``, also the costly values (``cost.COSTLY``) no configuration with a result has."""
        never = self.costly - self._measured_values(idx) if costly and self.costly else set()
        if not idx or not in_flight:
            return never
        return never | flight.pending(sorted(self._busy(in_flight)), self.value_keys, self._measured_values(idx),
                                      self._looked_for)

    def _beside(self, model: Model, open_: list[int], idx: list[int], in_flight: set[str], p_fit: np.ndarray) -> int | None:
        """``flight.beside``: what a slot measures where it would wait for a look (None: nothing)."""
        measured = self._measured_values(idx)
        looking = flight.pending(sorted(self._busy(in_flight)), self.value_keys, measured, self._looked_for)
        at = flight.beside(open_, self.value_keys, looking, (self.costly - measured) - looking)
        chances = self._chances(model, at, p_fit) if at else np.zeros(1)
        return at[int(np.argmax(chances))] if chances.max() >= STOP_CHANCE else None

    def _looked_for(self, name: str) -> bool:
        """Whether each value of parameter ``name`` needs its look: searched, and not the batch."""
        return name in self.searched and name != self.scaling

    def _ends(self, measured: Model | None, open_: list[int], idx: list[int], in_flight: set[str],
              p_fit: np.ndarray, unsure: bool = False) -> bool:
        """Whether a done verdict ends the trials in flight too (``flight``): none is a look, and
        from the measurements alone, no configuration left or in flight is likely to beat the best
        by more than the band. ``unsure`` (measuring again could not settle the leaders): what is
        measured again in flight is not waited for; only new ones are judged, rivals aside."""
        flying = sorted(i for i in self._busy(in_flight) if p_fit[i] > 0.0)
        new = [i for i in flying if i not in self._seen.measured] if unsure else flying
        if not flying or measured is None or self._looking(idx, in_flight):
            return False
        rivals = [] if unsure else [i for i in self._seen.rivals(measured.incumbent, set()) if i not in flying]
        return not new or self._verdict(measured, list(dict.fromkeys(open_ + new)), rivals, p_fit, 0, 0, False).done

    def _members(self, i: np.ndarray, yc: np.ndarray, noise: np.ndarray | None = None,
                 floor: float | None = None, counts: np.ndarray | None = None) -> list[tuple[float, S.Hyper]]:
        """The hyperparameter mixture: fitted at every decision up to ``REFIT_ALWAYS`` measurements;
        past them, again once they grew by a fifth (between refits new measurements move the
        posterior, not the weights). A resumed study refits at once, so a verdict depends on the
        measurements, not on how many runs made them (below ``REFIT_ALWAYS``)."""
        n = len(i)
        if self._fitted is None or n <= REFIT_ALWAYS or n >= 1.2 * self._fitted[0] or n < self._fitted[0]:
            # once processes of one configuration were compared here, their disagreement is in each
            # measurement's noise (``Measurements.floor``): the model adds the least of its grid beyond it
            beyond = S.BEYOND_MEASURED if self._seen.between_dof == 0 else S.SIGMA_N[0]
            self._fitted = (n, S.fit(self.space, i, yc, self.noise_floor if floor is None else floor, noise, counts,
                                     beyond))
        return self._fitted[1]

    def _chances(self, model: Model, open_: list[int], p_fit: np.ndarray) -> np.ndarray:
        """Per candidate: the chance that it fits and beats the best measured by more than the band
        (once per decision: the verdict and the choice both read it)."""
        key = tuple(open_)
        if model.chances is None or model.chances[0] != key:
            model.chances = (key, p_fit[open_] * model.chance_above(model.incumbent, np.array(open_), self.threshold))
        return model.chances[1]

    def _best_candidate(self, model: Model | None, open_: list[int], p_fit: np.ndarray,
                        held: np.ndarray | None = None) -> int:
        """The configuration likeliest to fit and beat the best by more than the band (when none
        is likely to, the largest expected improvement times the chance to fit); ``held``: a
        factor per configuration for the memory of those in flight (``flight.hostage``)."""
        held_here = 1.0 if held is None else held[open_]
        if model is None:  # nothing measured: the likeliest to fit among the priors' best
            prior = self.space.H[open_] @ self.space.prior_mean
            return open_[int(np.argmax(np.log(np.clip(p_fit[open_] * held_here, 1e-9, None)) + prior))]
        score = self._chances(model, open_, p_fit)
        if score.max() < 1e-6:
            score = p_fit[open_] * model.expected_gain(model.incumbent, np.array(open_))
        score = score * held_here
        return open_[int(np.argmax(score - 1e-12 * np.arange(len(open_))))]

    def _verdict(self, model: Model | None, open_: list[int], rivals: list[int], p_fit: np.ndarray, left: int,
                 too_large: int, bisecting: bool) -> Verdict:
        """The chance that some configuration beats the best measured by more than the band: one
        not measured (and fitting), or one measured (a rival: ``remeasure``) whose spread allows it."""
        if model is None or bisecting:
            return Verdict(False, 1.0, left, too_large)
        candidates = open_ + rivals
        marginal = self._chances(model, candidates, p_fit)
        if marginal.sum() < STOP_CHANCE:  # even summed (a bound on "any"), small enough
            chance = float(marginal.sum())
        elif marginal.max() >= STOP_CHANCE:  # one alone is likely enough: no need to sample
            chance = float(marginal.max())
        else:
            ranked = np.argsort(-marginal)
            top = np.array([candidates[j] for j in ranked[:TOP]])
            rest = float(marginal[ranked[TOP:]].sum())
            chance = min(1.0, model.chance_any_above(model.incumbent, top, p_fit[top], self.threshold) + rest)
        done = chance < STOP_CHANCE
        lead = float(marginal[:len(open_)].max()) if open_ else 0.0
        return Verdict(done, chance, left, too_large, reason(chance, left, too_large, self.band) if done else "",
                       lead=lead)
