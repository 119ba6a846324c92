"""Membership scores: does the model know text it was served repeatedly better than text it never saw?

Three scores per training window, each higher for text the model knows better than its difficulty explains:
  min_k_pp         Min-K%++ (Zhang et al. 2024): per next-token position, (log p(x_t) - mu_t) / sigma_t, with mu_t
                   and sigma_t the mean and standard deviation of log p under the model's own next-token
                   distribution at t; the window's score is the mean of its lowest k% (`min_k_fraction`).
  zlib             the zlib-normalised loss (Carlini et al. 2021): -(the window's summed NLL, nats) / (zlib-compressed
                   bytes of its token ids, packed as uint8, uint16 or uint32 by the largest id). Text that is
                   merely repetitive compresses well and so gets no credit for its low loss.
  reference_ratio  CE of a reference model / CE of the run's model on the window: the reference's difficulty of
                   the same text cancels out. The reference is another run's model (`--reference RUN`, e.g. a
                   healthy run of the same recipe) or, by default, the run's earliest checkpoint.
The test, per source: the AUROC of the score between windows served >= `repeat_min` times and never-served
windows of the same source (of the other sources when it has none unserved); it flags when the Mann-Whitney
z of that AUROC exceeds `membership_z` and the AUROC `membership_auroc`. Under no replay the repeated and
unseen windows are exchangeable, so the false-positive rate per source is about 1 - Phi(z) (0.13% at z = 3).
Planned repetition (a mix spec that repeats a source) is repetition too and flags the same way; the message
says how many servings the repeated windows had.
"""

from __future__ import annotations

import math
import zlib

import numpy as np
from scipy.stats import rankdata

from olmax.evals.exposure_file import Exposure
from olmax.evals.model_checks import sample_rows
from olmax.evals.scoring import token_stats
from olmax.evals.verdicts import Probe, Thresholds, check_verdict, skipped_check

SCORES = ("min_k_pp", "zlib", "reference_ratio")


def window_scores(
    model, tokens: np.ndarray, *, reference=None, min_k_fraction: float = 0.2, batch_size: int = 8
) -> dict[str, np.ndarray]:
    """Per window (row of `tokens`, scored on every next token as the train loss is): `ce` (nats per target),
    `min_k_pp`, `zlib`, and with a reference model `reference_ce` and `reference_ratio`."""
    tokens = np.asarray(tokens)
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    lp, mu, sigma = token_stats(model, inputs, targets, batch_size=batch_size)
    ce = -lp.astype(np.float64).mean(axis=1)
    z = (lp - mu) / np.maximum(sigma, 1e-6)
    k = max(1, int(math.ceil(min_k_fraction * z.shape[1])))
    min_k_pp = np.sort(z, axis=1)[:, :k].astype(np.float64).mean(axis=1)
    top = tokens.max(initial=0)
    width = np.uint8 if top < 1 << 8 else np.uint16 if top < 1 << 16 else np.uint32
    packed = [len(zlib.compress(row.astype(width).tobytes(), 9)) for row in tokens]
    out = {"ce": ce, "min_k_pp": min_k_pp, "zlib": -(ce * targets.shape[1]) / np.asarray(packed, np.float64)}
    if reference is not None:
        ref_lp, _, _ = token_stats(reference, inputs, targets, batch_size=batch_size)
        ref_ce = -ref_lp.astype(np.float64).mean(axis=1)
        out["reference_ce"] = ref_ce
        out["reference_ratio"] = ref_ce / np.maximum(ce, 1e-9)
    return out


def auroc(members: np.ndarray, others: np.ndarray) -> tuple[float, float]:
    """(AUROC, Mann-Whitney z): the chance a member's score exceeds a non-member's (ties count half), and its
    standard score under exchangeability (mean 0.5, the normal approximation of U with the tie correction)."""
    n1, n2 = len(members), len(others)
    ranks = rankdata(np.concatenate([members, others]))
    u = float(ranks[:n1].sum() - n1 * (n1 + 1) / 2)
    _, counts = np.unique(ranks, return_counts=True)
    n = n1 + n2
    tie = float((counts**3 - counts).sum()) / (n * (n - 1)) if n > 1 else 0.0
    var = n1 * n2 / 12.0 * ((n + 1) - tie)
    z = (u - n1 * n2 / 2.0) / math.sqrt(var) if var > 0 else 0.0
    return u / (n1 * n2), z


def check_membership(
    model,
    exp: Exposure,
    th: Thresholds,
    *,
    reference=None,
    reference_name: str | None = None,
    probe: Probe | None = None,
) -> dict[str, dict]:
    """The three membership checks (`SCORES`), one verdict each, over the exposure's repeated and never-served
    windows (the first `probe_len` tokens of each); `reference`: the reference model of `reference_ratio`."""
    if exp.tokens is None or exp.source is None:
        return dict.fromkeys(SCORES, skipped_check("the exposure file has no tokens/sources; pass --mix"))
    probe = probe or Probe()
    per_stratum, batch_size = probe.per_stratum, probe.batch_size
    rng = np.random.default_rng(probe.seed + 3)
    length = min(probe.probe_len, exp.tokens.shape[1])
    repeated, unseen = exp.count >= th.repeat_min, exp.count == 0
    per_source: dict[str, dict] = {}
    for src in sorted(set(exp.source.tolist())):
        of_src = exp.source == src
        members = sample_rows(rng, np.flatnonzero(of_src & repeated), per_stratum)
        if members.size < th.min_samples:
            continue
        others, where = sample_rows(rng, np.flatnonzero(of_src & unseen), per_stratum), "the same source"
        if others.size < th.min_samples:
            others, where = (
                sample_rows(rng, np.flatnonzero(~of_src & unseen), per_stratum),
                "the other sources",
            )
        if others.size < th.min_samples:
            continue
        rows = np.concatenate([members, others])
        scores = window_scores(
            model,
            exp.tokens[rows, :length],
            reference=reference,
            min_k_fraction=th.min_k_fraction,
            batch_size=batch_size,
        )
        per_source[src] = {
            "repeated": int(members.size),
            "unseen": int(others.size),
            "unseen_from": where,
            "mean_servings": float(exp.count[members].mean()),
            "scores": scores,
        }
    out = {}
    for name in SCORES:
        if name == "reference_ratio" and reference is None:
            out[name] = skipped_check("no reference model: --reference RUN, or a run with two checkpoints")
            continue
        if not per_source:
            out[name] = skipped_check(
                f"no source has >= {th.min_samples} windows served >= {th.repeat_min}x and >= "
                f"{th.min_samples} never-served windows to compare them with"
            )
            continue
        sources, flagged = {}, []
        for src, s in per_source.items():
            vals = s["scores"][name]
            a, z = auroc(vals[: s["repeated"]], vals[s["repeated"] :])
            hit = z > th.membership_z and a > th.membership_auroc
            sources[src] = {
                "auroc": a,
                "z": z,
                "repeated": s["repeated"],
                "unseen": s["unseen"],
                "unseen_from": s["unseen_from"],
                "mean_servings": s["mean_servings"],
                "flagged": hit,
            }
            if hit:
                flagged.append(src)
        worst = max(sources, key=lambda k: sources[k]["z"])
        w = sources[worst]
        msg = (
            f"source {worst}: {name} tells {w['repeated']} windows served {w['mean_servings']:.1f}x on average "
            f"from {w['unseen']} never-served windows of {w['unseen_from']} with AUROC {w['auroc']:.3f} "
            f"(z {w['z']:+.2f}; flags above z {th.membership_z:g} and AUROC {th.membership_auroc:g})"
        )
        if name == "reference_ratio":
            msg += f"; reference {reference_name or 'given'}"
        out[name] = {**check_verdict(bool(flagged), msg), "flagged_sources": flagged, "sources": sources}
    return out
