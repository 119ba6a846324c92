"""Thresholds and verdicts shared by the memorization checks (see memorization.py) and `olmax eval gains`.

A command with a verdict says one of three things (`VERDICTS`), each with its own exit status
(`EXIT_CODES`): flagged (a check that ran flagged: exit 1), clean (no check flagged and enough of them
ran: exit 0) or inconclusive (nothing flagged, but too few checks could run, or none of the checks that
compared windows served beyond the plan had the power to see a `power_dose` dose: exit 3).
Exit 2 stays the status of a bad input (olmax.errors.OlmaxError).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from olmax.errors import OlmaxError
from olmax.evals.power import DOSES, Effect, Rule, weakest


@dataclass(frozen=True)
class Probe:
    """How the model checks probe a model: windows sampled per stratum, tokens scored per window, the
    scoring batch size, the sampling seed, and whether to probe each source's power too."""

    per_stratum: int = 64
    probe_len: int = 512
    batch_size: int = 8
    seed: int = 0
    power: bool = False  # also what each source could have shown had it been over-served (`power_probe`)


@dataclass(frozen=True)
class Models:
    """What the model checks score: the model, how it is probed, its pad id; `reference_ratio`'s reference
    model (another run's, e.g. a healthy run of the same recipe) and `checkpoint_diff`'s earlier checkpoint of
    this run, each with the name the report gives it; and what the checks' power assumes of the model."""

    model: object
    probe: Probe = Probe()
    pad_id: int = 0
    reference: object = None
    reference_name: str | None = None
    earlier: object = None
    earlier_name: str | None = None
    # the share of the scored checkpoint's steps after the earlier one: what part of a dose's servings
    # check 9 sees (a serving before the earlier checkpoint lowers both losses); its power needs it
    earlier_share: float | None = None
    # the CE a window loses per extra serving, for the checks' power (olmax/evals/power.py); None: no power
    # figures (`memorization_report` sets the measurement nearest the model's size)
    effect: Effect | None = None


@dataclass(frozen=True)
class Thresholds:
    repeat_min: int = 2  # "repeated": served at least this many times
    min_samples: int = 4  # instances per stratum below which checks 1 and 4 are skipped
    exposure_gap_nats: float = 0.1  # check 1: CE(once-seen, else unseen) - CE(repeated) above this flags
    train_window: int = 20  # train records averaged around a step (raw per-step losses are noisy)
    min_train_drop: float = 0.05  # checks 2-3: a train-loss improvement smaller than this is noise
    # check 2: flag when a held-out set kept less than this share of the train-loss drop since an earlier
    # eval step (and the gap widened by more than gap_growth_nats). Held-out sets unlike the training mix
    # (e.g. QA sets for a code model) improve less than train loss even in a healthy run, so the default
    # only flags held-out loss that (nearly) stopped improving; check 5 is the in-distribution comparison.
    gap_heldout_share: float = 0.1
    gap_growth_nats: float = 0.1
    # check 2 compares from an eval step only where the set's CE is within this of the train loss: a set
    # far from the training distribution says little about memorization (its loss barely moves anyway)
    comparable_nats: float = 0.5
    reference_gain_nats: float = 0.05  # check 3: train-loss gain over the reference that counts
    reference_heldout_share: float = (
        0.5  # check 3: flag when held-out keeps less than this share of that gain
    )
    extract_prefix: int = 32  # check 4: prompt tokens
    extract_new: int = 32  # check 4: greedy tokens compared
    extract_rate_gap: float = 0.05  # check 4: exact-match rate repeated - unrepeated above this flags
    unseen_gap_nats: float = 0.1  # check 5: CE(unseen mix text) - train loss above this (and 3 s.e.) flags
    # check 6 (contaminated): a set flags when the lower end of the 95% bootstrap interval of its CE gain
    # (how much more its contaminated items improved than its clean ones since the first scored step) is
    # above this; 0: any gain beyond the interval (bench/studies/memorization_power.py measures its power)
    contam_gain_nats: float = 0.0
    # checks 7-9 (olmax/evals/membership.py): a source flags when the AUROC of its windows served >= repeat_min
    # times against never-served windows has a Mann-Whitney z above membership_z and exceeds membership_auroc
    membership_z: float = 3.0
    membership_auroc: float = 0.6
    min_k_fraction: float = 0.2  # Min-K%++: the share of a window's lowest-scoring positions averaged
    # `olmax eval memorization` says clean only when at least this many checks ran (the rest skipped for
    # want of an input): fewer is inconclusive, not clean
    min_checks_ran: int = 3
    # a check that compared windows served beyond the plan, flagged nothing and had less than `min_power`
    # chance to flag a `power_dose` dose (olmax/evals/power.py) says inconclusive, not ok; the verdict is
    # clean only when at least one such check had that power
    min_power: float = 0.9
    power_dose: int = 4

    @classmethod
    def parse(cls, overrides: list[str]) -> Thresholds:
        fields = {f.name: f.type for f in dataclasses.fields(cls)}
        values = {}
        for item in overrides:
            name, _, raw = item.partition("=")
            if name not in fields or not raw:
                raise OlmaxError(
                    f"--threshold {item!r}: expected NAME=VALUE with NAME one of {sorted(fields)}"
                )
            values[name] = int(raw) if fields[name] == "int" else float(raw)
        return cls(**values)


VERDICTS = ("flagged", "clean", "inconclusive")
EXIT_CODES = {"clean": 0, "flagged": 1, "inconclusive": 3}


def power_test(check: str, th: Thresholds) -> Rule:
    """How `check` decides, for its power: check 1 a mean test (3 standard errors and `exposure_gap_nats`),
    checks 7-10 a rank test (`membership_z` and the `membership_auroc` floor)."""
    if check == "exposure":
        return Rule("mean", 3.0, th.exposure_gap_nats)
    return Rule("rank", th.membership_z, th.membership_auroc)


def power_doses(th: Thresholds) -> tuple[int, ...]:
    """The doses a check's power is stated at: 2x and 4x, and `power_dose` when it is another."""
    return tuple(sorted({*DOSES, th.power_dose}))


def rate_power(verdict: dict, per_source: dict[str, dict], th: Thresholds) -> dict:
    """`verdict` with its power at `power_dose` (`per_source`: each compared source's power figures): the
    weakest source's; a check that flagged nothing with less than `min_power` says inconclusive."""
    rated = weakest(per_source, th.power_dose)
    if rated is None:
        return verdict
    out = {**verdict, "power": rated}
    if not verdict["flagged"] and verdict["status"] != "skipped" and rated["value"] < th.min_power:
        out["status"] = "inconclusive"
        out["message"] = (
            f"inconclusive (power {rated['value']:.0%} at {rated['dose']}x in source {rated['source']}): "
            + verdict["message"]
        )
    return out


def overall_verdict(checks: dict[str, dict], min_ran: int = 1, min_power: float | None = None) -> dict:
    """The three-valued verdict over `checks` (name -> check dict): flagged when any check flagged, clean when
    none did, at least `min_ran` ran (status other than skipped) and, among the checks that state their power
    (`"power"`: they compared windows served beyond the plan), at least one reached `min_power`; else
    inconclusive. With the checks that ran, those skipped and what each skipped one needs, and the best
    stated power (`power`)."""
    ran = [k for k, c in checks.items() if c["status"] != "skipped"]
    skipped = {k: c["message"] for k, c in checks.items() if c["status"] == "skipped"}
    flagged = [k for k, c in checks.items() if c["flagged"]]
    rated = {k: c["power"] for k, c in checks.items() if c.get("power")}
    best = max(rated, key=lambda k: rated[k]["value"]) if rated else None
    power = {**rated[best], "check": best} if best else None
    underpowered = bool(power and min_power is not None and power["value"] < min_power)
    verdict = (
        "flagged" if flagged else "clean" if len(ran) >= min_ran and not underpowered else "inconclusive"
    )
    return {
        "verdict": verdict,
        "exit_code": EXIT_CODES[verdict],
        "flagged_checks": flagged,
        "ran": ran,
        "skipped": skipped,
        "min_checks_ran": min_ran,
        "power": power,
        "min_power": min_power,
        "underpowered": underpowered and len(ran) >= min_ran,
    }


def verdict_lines(v: dict, what: str) -> list[str]:
    """The verdict's headline and, under it, the checks that ran and those skipped with what each needs."""
    power = v.get("power")
    seen = (
        f"; power {power['value']:.0%} at {power['dose']}x ({power['check']}, source {power['source']})"
        if power
        else ""
    )
    head = {
        "flagged": f"{what}: FLAGGED by {', '.join(v['flagged_checks'])}",
        "clean": f"{what}: clean ({len(v['ran'])} checks ran, none flagged{seen})",
        "inconclusive": (
            f"{what}: INCONCLUSIVE (exit {EXIT_CODES['inconclusive']}): power {power['value']:.0%} at "
            f"{power['dose']}x: no check that compared windows served beyond the plan had "
            f"{v['min_power']:.0%} power to see a {power['dose']}x dose (best: {power['check']}, source "
            f"{power['source']}); each check's power is in the report"
            if v.get("underpowered")
            else f"{what}: INCONCLUSIVE (exit {EXIT_CODES['inconclusive']}): {len(v['ran'])} of "
            f"{len(v['ran']) + len(v['skipped'])} checks could run, at least {v['min_checks_ran']} must to call it "
            "clean; each skipped one says what it needs"
        ),
    }[v["verdict"]]
    lines = [head, f"  ran: {', '.join(v['ran']) or 'none'}"]
    if v["skipped"]:
        lines.append("  skipped (and what each needs):")
        lines += [f"    {k}: {why}" for k, why in v["skipped"].items()]
    return lines


def skipped_check(why: str) -> dict:
    """A check that could not run, and why (never flags)."""
    return {"status": "skipped", "flagged": False, "message": why}


def check_verdict(flagged: bool, message: str, **numbers) -> dict:
    """A check's result: flagged or ok, its one-line message and its numbers."""
    return {"status": "flagged" if flagged else "ok", "flagged": flagged, "message": message, **numbers}
