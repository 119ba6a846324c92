"""olmax/testing/dedup_corpus.py scores removals right; bench/studies/dedup_calibration.py and bench/peers/dedup.py run end to end."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.harness import ROOT
from bench.peers import dedup as bench_dedup
from olmax.testing import dedup_corpus as dc

PEERS_VENV = ROOT / ".venv-dedup-peers"


def small_corpus():
    """Six documents: a planted pair (J 0.9), a planted trio, two hard-negative siblings, one single."""
    docs = [
        dc.Doc("o1", "", "g1", "light_edits", "original"),
        dc.Doc("c1", "", "g1", "light_edits", "copy"),
        dc.Doc("o2", "", "g2", "syndicated", "original"),
        dc.Doc("c2", "", "g2", "syndicated", "copy"),
        dc.Doc("d2", "", "g2", "syndicated", "copy"),
        dc.Doc("n1", "", "g3", "templated", "negative"),
        dc.Doc("n2", "", "g4", "templated", "negative"),
        dc.Doc("s1", "", "g5", "single", "single"),
    ]
    pairs = [
        dc.Pair("o1", "c1", "light_edits", 0.9, True),
        dc.Pair("o2", "c2", "syndicated", 0.95, True),
        dc.Pair("o2", "d2", "syndicated", 0.82, True),
        dc.Pair("c2", "d2", "syndicated", 0.7, True),
        dc.Pair("n1", "n2", "templated", 0.6, False),
    ]
    return dc.Corpus(0, docs, pairs)


def test_score_counts_recall_by_band_false_removals_and_clusters():
    corpus = small_corpus()
    removed = [
        {"id": "c1", "kept": "o1"},
        {"id": "c2", "kept": "o2"},
        {"id": "n2", "kept": "n1"},  # a hard negative removed: false
        {"id": "filler-7", "kept": "s1"},  # outside the planted corpus: ignored
    ]
    s = dc.score(corpus, removed)
    assert s.recall["light_edits"][">=0.87"] == (1, 1)
    assert s.recall["syndicated"][">=0.87"] == (1, 1)
    assert s.recall["syndicated"]["0.80-0.87"] == (0, 1)  # d2 was left in its own cluster
    assert s.recall_at() == (2, 2)
    assert (s.removals, s.false_removals, s.hard_negatives_removed) == (3, 1, 1)
    assert s.removed["templated"] == (1, 1)
    assert s.cluster_sizes == {2: 3} and s.largest_planted == 3
    assert abs(s.false_frac - 1 / 3) < 1e-9


def test_score_follows_chains_and_flags_a_cluster_larger_than_any_planted_group():
    corpus = small_corpus()
    # d2 -> c2 -> o2 is one cluster of three; s1 and the negatives joined to it make it a giant one
    removed = [{"id": x, "kept": "o2"} for x in ("c2", "n1", "n2", "s1")] + [{"id": "d2", "kept": "c2"}]
    s = dc.score(corpus, removed)
    assert s.recall_at("0.80-0.87") == (1, 1) and s.recall_at("<0.80") == (1, 1)
    assert s.cluster_sizes == {6: 1} and s.false_removals == 3
    assert "A GIANT CLUSTER" in dc.cluster_line(s)
    assert dc.score(corpus, [{"id": "c1", "kept": None}]).problems


def test_true_jaccard_reads_words_its_own_way():
    assert dc.true_jaccard("One two three four five six", "one, TWO three four five six!") == 1.0
    assert dc.true_jaccard("a b c d e f", "a b c d e g") == 1 / 3
    assert dc.true_jaccard("short", "short") == 1.0


def test_edits_keep_what_they_promise():
    rng = random.Random(3)
    text = "\n\n".join(
        f"Paragraph {i} says that the {i}th item costs {10 * i} dollars in 2024." for i in range(6)
    )
    assert dc.true_jaccard(text, dc.rewrap(text, rng)) == 1.0 and dc.rewrap(text, rng) != text
    other = dc.other_numbers(text, rng)
    assert re.sub(r"\d", "", other) == re.sub(r"\d", "", text)
    assert all(a != b for a, b in zip(re.findall(r"\d+", text), re.findall(r"\d+", other)))
    assert len(dc.dropped_paragraph(text, rng).split("\n\n")) == 5
    cut = dc.truncated(text, rng)
    assert text.startswith(cut.split("\n\n")[0][:40])
    edited = dc.light_edits(text, rng)
    assert edited != text and dc.true_jaccard(text, edited) > 0.5


@pytest.mark.slow
def test_corpus_is_the_same_for_the_same_seed_and_plants_every_kind():
    a = dc.build(5, per_kind=6, singles=10, site_pages=10)
    b = dc.build(5, per_kind=6, singles=10, site_pages=10)
    assert [(d.id, d.text, d.group) for d in a.docs] == [(d.id, d.text, d.group) for d in b.docs]
    kinds = {d.kind for d in a.docs}
    assert set(dc.POSITIVE_KINDS) | set(dc.NEGATIVE_KINDS) | {"single"} <= kinds
    assert all(p.jaccard < dc.NEGATIVE_MAX_JACCARD for p in a.pairs if not p.positive)
    by_id = a.by_id()
    for p in a.pairs[:50]:  # the stored truth is the module's own Jaccard of the texts
        assert p.jaccard == dc.true_jaccard(by_id[p.a].text, by_id[p.b].text)


def run(module: str, *args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", module, *args, "--work", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=1800,
        cwd=ROOT,
    )


def test_a_stage_within_the_rounds_noise_gets_no_figure():
    # 5 CPU-s against rounds that agree to a fifth of a second: each round's difference
    assert bench_dedup.stage_alone([7.6, 7.2, 7.6], [2.3, 2.2, 2.4]) == pytest.approx([5.3, 5.0, 5.2])
    # one round below zero: a ratio to it would be negative
    assert bench_dedup.stage_alone([3.1, 2.9], [3.0, 3.0]) is None
    # every round positive but smaller than the spreads: a ratio to it would be tens of times off
    assert bench_dedup.stage_alone([3.3, 3.0], [3.0, 2.8]) is None
    # one round: only the sign can be checked
    assert bench_dedup.stage_alone([3.1], [3.0]) == pytest.approx([0.1])
    assert bench_dedup.stage_alone([2.9], [3.0]) is None


@pytest.mark.slow
def test_calibration_tiny_runs_olmax_and_meets_the_goals(tmp_path):
    proc = run(
        "bench.studies.dedup_calibration",
        "--per-kind",
        "5",
        "--singles",
        "20",
        "--sweep",
        "0.9",
        tmp_path=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert "recall per kind and true-Jaccard band" in out and "threshold sweep" in out
    assert re.search(r"goals at 0\.8: .*: MET$", out.strip().splitlines()[-1])


@pytest.mark.slow
def test_dedup_bench_tiny_olmax_side(tmp_path):
    proc = run(
        "bench.peers.dedup",
        "--per-kind",
        "5",
        "--singles",
        "20",
        "--peers",
        "",
        "--reps",
        "1",
        "--results",
        str(tmp_path),
        tmp_path=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "olmax minhash alone" in proc.stdout and "substring (--dedup substring" in proc.stdout
    assert proc.stdout.strip().endswith("olmax/rensa = n/a (rensa not run like for like)")
    rec = json.loads((tmp_path / "dedup.json").read_text())
    assert set(rec["timings"]) == {
        "olmax.prepare_minhash",
        "olmax.prepare_plain_of_kept",
        "olmax.prepare_plain",
        "olmax.prepare_exact",
        "olmax.prepare_substring",
    }
    figs = rec["figures"]
    assert figs["olmax_plain_mb_per_cpu_s"]["median"] > 0
    # at this size a stage may be lost in the noise: then it has no figure and the note says why
    stage_figure = {"minhash": "olmax_mb_per_cpu_s", "exact": "olmax_exact_mb_per_cpu_s"}
    stage_figure["substring"] = "olmax_substring_mb_per_cpu_s"
    for stage, name in stage_figure.items():
        note = rec["notes"].get(f"unresolved_{stage}")
        assert (name in figs) != (note is not None), stage
        if note is None:
            assert figs[name]["n"] == 1 and figs[name]["median"] > 0
        else:
            assert bench_dedup.stage_alone(note["with_cpu_s"], note["without_cpu_s"]) is None
    if "pool_dedup_vcpu_h" in figs:
        stages = sum(figs[f"pool_{s}_vcpu_h"]["median"] for s in ("exact", "minhash", "substring"))
        assert figs["pool_dedup_vcpu_h"]["median"] == pytest.approx(stages)
    else:
        assert any(k.startswith("unresolved_") for k in rec["notes"])


@pytest.mark.slow
@pytest.mark.skipif(
    not (PEERS_VENV / "bin" / "python").exists(), reason="no peers' venv: bench/setup/setup_dedup_peers.sh"
)
def test_dedup_bench_tiny_with_peers(tmp_path):
    proc = run(
        "bench.peers.dedup",
        "--per-kind",
        "5",
        "--singles",
        "20",
        "--no-substring",
        "--reps",
        "2",
        "--results",
        str(tmp_path),
        tmp_path=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for tool in ("datatrove", "rensa", "datasketch", "rensa no check"):
        assert re.search(rf"^{tool} +\d", proc.stdout, re.M), tool
    last = proc.stdout.strip().splitlines()[-1]
    rec = json.loads((tmp_path / "dedup.json").read_text())
    if "unresolved_minhash" in rec["notes"]:  # the stage lost in the noise at this size: no ratio at all
        assert re.fullmatch(
            r"dedup minhash MB per CPU-s olmax/rensa = n/a \(minhash alone is within .*\)", last
        )
        assert not any(k.startswith("ratio_") for k in rec["figures"])
        note = rec["notes"]["unresolved_minhash"]
        assert bench_dedup.stage_alone(note["with_cpu_s"], note["without_cpu_s"]) is None
        return
    assert re.fullmatch(r"dedup minhash MB per CPU-s olmax/rensa = \d+\.\dx \(\d+\.\d–\d+\.\d\)", last), last
    for tool in (
        "datatrove",
        "rensa",
        "datasketch",
    ):  # each peer's whole pipeline, interleaved with olmax's runs
        assert rec["timings"][f"{tool}.pipeline"]["how"] == rec["timings"]["olmax.prepare_minhash"]["how"]
        assert len(rec["timings"][f"{tool}.pipeline"]["values"]) == 2
        ratio = rec["figures"][f"ratio_{tool}"]
        olmax_stage = [
            a - b
            for a, b in zip(
                rec["timings"]["olmax.prepare_minhash"]["values"],
                rec["timings"]["olmax.prepare_plain_of_kept"]["values"],
                strict=True,
            )
        ]
        peer = rec["timings"][f"{tool}.pipeline"]["values"]
        assert ratio["values"] == pytest.approx([p / o for p, o in zip(peer, olmax_stage, strict=True)])


# The calibration's figures as docs/dedup-benchmarks.md and the README give them, at the docs' sizes:
# (seed, pairs caught at true J >= 0.87, removals), every removal right, no hard negative, largest 8.
DOCS_CALIBRATION = [(0, "660/660", 717), (1, "618/619", 693)]


@pytest.mark.slow
@pytest.mark.parametrize(("seed", "caught", "removals"), DOCS_CALIBRATION)
def test_calibration_at_the_docs_size_gives_the_docs_figures(seed, caught, removals, tmp_path):
    proc = run("bench.studies.dedup_calibration", "--seed", str(seed), "--sweep", "", tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert re.search(rf"^all +{caught} ", out, re.M), out[-3000:]
    assert re.search(rf"^all +{removals} +0  \(0\.00% of removals.*hard negatives removed: 0$", out, re.M), (
        out[-3000:]
    )
    assert re.search(r"largest 8, largest planted group 8$", out, re.M), out[-3000:]
    assert out.strip().splitlines()[-1].endswith(": MET")
