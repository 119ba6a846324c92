"""Checks 7-10 (olmax/evals/membership.py): the AUROC and its z equal scikit-learn's and SciPy's, the four
window scores equal their definitions computed here from the logits, and the checks flag a stub that memorized
its over-served windows, stay quiet where over-served and as-planned windows are alike, and never count a
planned repeat as a member."""

import math
import zlib

import jax.numpy as jnp
import numpy as np
import pytest
from scipy.stats import mannwhitneyu, norm
from sklearn.metrics import roc_auc_score

from olmax.evals.membership import SCORES, auroc, check_membership, detectable_auroc, window_scores
from olmax.evals.memorization import Models, Probe, memorization_report
from olmax.evals.verdicts import Thresholds
from tests.evals.test_memorization import V, stub_model, synthetic_exposure


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_auroc_and_z_equal_sklearn_and_scipy(seed):
    rng = np.random.default_rng(seed)
    a = np.round(rng.normal(0.4, 1, 37), 1)  # rounded: ties across and within the groups
    b = np.round(rng.normal(0.0, 1, 53), 1)
    area, z = auroc(a, b)
    labels = np.r_[np.ones(a.size), np.zeros(b.size)]
    assert area == pytest.approx(roc_auc_score(labels, np.r_[a, b]), abs=1e-12)
    p = mannwhitneyu(a, b, alternative="greater", method="asymptotic", use_continuity=False).pvalue
    assert z == pytest.approx(norm.isf(p), abs=1e-6)


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def test_window_scores_are_their_definitions():
    rng = np.random.default_rng(0)
    table = jnp.asarray(rng.normal(0, 2, (V, V)).astype(np.float32))
    ref_table = jnp.asarray(rng.normal(0, 2, (V, V)).astype(np.float32))
    toks = rng.integers(0, V, (5, 41))
    got = window_scores(
        lambda ids: table[ids],
        toks,
        reference=lambda ids: ref_table[ids],
        earlier=lambda ids: ref_table[ids],
        min_k_fraction=0.25,
        batch_size=2,
    )
    for i, row in enumerate(toks):
        logp = log_softmax(np.asarray(table, np.float64)[row[:-1]])
        lp = logp[np.arange(40), row[1:]]
        mu = (np.exp(logp) * logp).sum(-1)
        sd = np.sqrt((np.exp(logp) * logp**2).sum(-1) - mu**2)
        z = np.sort((lp - mu) / sd)
        assert got["min_k_pp"][i] == pytest.approx(z[:10].mean(), rel=1e-4)  # ceil(0.25 x 40) = 10
        ce = -lp.mean()
        assert got["ce"][i] == pytest.approx(ce, rel=1e-5)
        packed = len(zlib.compress(row.astype(np.uint8).tobytes(), 9))
        assert got["zlib"][i] == pytest.approx(-ce * 40 / packed, rel=1e-5)
        ref = log_softmax(np.asarray(ref_table, np.float64)[row[:-1]])
        ref_ce = -ref[np.arange(40), row[1:]].mean()
        assert got["reference_ratio"][i] == pytest.approx(ref_ce / ce, rel=1e-5)
        assert got["checkpoint_diff"][i] == pytest.approx(ref_ce - ce, rel=1e-4, abs=1e-5)


@pytest.mark.parametrize(("n_over", "n_planned"), [(16, 16), (64, 128), (500, 40)])
def test_detectable_auroc_is_where_z_crosses_the_threshold(n_over, n_planned):
    """At continuous scores (no ties) a sample flags on z exactly when its AUROC passes detectable_auroc."""
    th = Thresholds(membership_auroc=0.5)
    edge = detectable_auroc(n_over, n_planned, th)
    rng = np.random.default_rng(n_over)
    seen = set()
    for shift in np.linspace(0.0, 1.5, 60):
        a, z = auroc(rng.normal(shift, 1, n_over), rng.normal(0, 1, n_planned))
        assert (z > th.membership_z) == (a > edge), (a, z, edge)
        seen.add(z > th.membership_z)
    assert seen == {False, True}  # both sides of the edge were drawn
    assert detectable_auroc(n_over, n_planned, Thresholds(membership_auroc=0.99)) == 0.99
    assert detectable_auroc(4 * n_over, 4 * n_planned, th) - 0.5 == pytest.approx((edge - 0.5) / 2, rel=0.02)


def uniform(ids):
    return jnp.zeros((*ids.shape, V), jnp.float32)


def test_checks_flag_memorized_repeats_and_not_alike_windows():
    th = Thresholds(min_samples=4)
    m = stub_model()
    both = Models(m, Probe(probe_len=64), reference=uniform, earlier=uniform, earlier_name="step 10 to 20")
    bad = check_membership(synthetic_exposure(True, n=16), th, both)
    for name in SCORES:
        assert bad[name]["flagged"], bad[name]["message"]
        web = bad[name]["sources"]["web"]
        assert web["auroc"] == 1.0 and web["z"] > 4 and web["over_served"] == 16 and web["as_planned"] == 16
        assert web["as_planned_from"] == "the same source" and web["mean_servings"] == 5.0
        assert web["mean_planned"] == 1.0
        assert web["detectable_auroc"] == detectable_auroc(16, 16, th)
        assert f"AUROC {web['detectable_auroc']:.3f} at this sample" in bad[name]["message"]
    assert bad["checkpoint_diff"]["checkpoints"] == "step 10 to 20"
    assert "loss change from step 10 to 20" in bad["checkpoint_diff"]["message"]
    ok = check_membership(synthetic_exposure(False, n=16), th, both)
    for name in SCORES:
        assert ok[name]["status"] == "ok" and abs(ok[name]["sources"]["web"]["z"]) < 1.0, ok[name]["message"]
    alone = check_membership(synthetic_exposure(True, n=16), th, Models(m, Probe(probe_len=64)))
    for name in ("reference_ratio", "checkpoint_diff"):
        assert alone[name]["status"] == "skipped", alone[name]
    assert "--reference RUN" in alone["reference_ratio"]["message"]
    assert "earlier checkpoint" in alone["checkpoint_diff"]["message"]
    assert alone["min_k_pp"]["flagged"]


def test_planned_repeats_are_not_members():
    """The stub knows the twice-served windows; the plan serves them twice, so nothing is over-served: every
    membership check is ok with nothing compared, and the report's repetition says planned 2x = served 2x."""
    m = stub_model()
    exp = synthetic_exposure(True, n=16, served=2, planned=2)
    both = Models(m, Probe(probe_len=64), reference=uniform, earlier=uniform)
    got = check_membership(exp, Thresholds(), both)
    for name in SCORES:
        assert got[name]["status"] == "ok" and got[name]["compared"] == "nothing", got[name]["message"]
    rep = memorization_report(None, exposure=exp, models=both)
    assert not rep["flagged"] and rep["verdict"] == "clean"
    web = rep["repetition"]["web"]
    assert web["planned_repetition"] == web["served_repetition"] == pytest.approx((16 * 2 + 16) / 32)
    assert web["over_served"] == 0 and web["plan"] == "the mix"


def test_report_holds_the_ten_checks_and_ors_them():
    m = stub_model()
    rep = memorization_report(
        None, exposure=synthetic_exposure(True, n=16), models=Models(m, Probe(probe_len=64))
    )
    assert list(rep["checks"]) == [
        "gap",
        "reference",
        "exposure",
        "extract",
        "train_vs_unseen",
        "contaminated",
        "min_k_pp",
        "zlib",
        "checkpoint_diff",
        "reference_ratio",
    ]
    assert rep["flagged"] and rep["checks"]["min_k_pp"]["flagged"] and rep["verdict"] == "flagged"
    assert rep["exit_code"] == 1 and "min_k_pp" in rep["flagged_checks"]
    assert rep["thresholds"]["membership_z"] == 3.0 and not math.isnan(rep["thresholds"]["membership_auroc"])
    none = memorization_report(None)
    assert {none["checks"][k]["status"] for k in SCORES} == {"skipped"} and not none["flagged"]
    assert none["verdict"] == "inconclusive" and none["exit_code"] == 3 and none["ran"] == []
