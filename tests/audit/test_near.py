"""`olmax audit dedup --near` and the loader audit's near-duplicate exposure: against brute force over
word 5-grams of the decoded text, and cluster for cluster against `data prepare --dedup minhash` on the
same documents."""

from __future__ import annotations

import json
import re

import numpy as np

from olmax.cli import main
from olmax.testing.prepare_testdata import stdlib_texts, write_jsonl
from tests.audit.audit_testdata import write_mix, write_shard

N = 5
# prepare's normalization, written out independently: lower-case, then words are runs of ASCII letters,
# digits and non-ASCII characters outside U+00A0-U+00BF, U+2000-U+206F and U+3000-U+3003
SEPARATORS = re.compile(r"[\x00-\x2f\x3a-\x40\x5b-\x60\x7b-\x7f\u00a0-\u00bf\u2000-\u206f\u3000-\u3003]+")


def grams(text: str) -> set:
    t = [w for w in SEPARATORS.split(text.lower()) if w]
    return {tuple(t[i : i + N]) for i in range(len(t) - N + 1)} if len(t) >= N else {tuple(t)}


def brute_clusters(docs: list[tuple[str, str]], threshold: float = 0.8) -> dict[str, list[str]]:
    """keep id -> members, from all pairs' exact word 5-gram Jaccard and union-find by first member."""
    g = [grams(t) for _, t in docs]
    parent = list(range(len(docs)))

    def find(x):
        while parent[x] != x:
            x = parent[x]
        return x

    for i in range(len(docs)):
        for j in range(i + 1, len(docs)):
            if len(g[i] & g[j]) / len(g[i] | g[j]) >= threshold:
                a, b = find(i), find(j)
                parent[max(a, b)] = min(a, b)
    out: dict[str, list[str]] = {}
    for i in range(len(docs)):
        if find(i) != i:
            out.setdefault(docs[find(i)][0], [docs[find(i)][0]]).append(docs[i][0])
    return out


def reformatted(text: str) -> str:
    """The same words with other line breaks, spacing and case: tokenizes differently, the same words."""
    words = text.split()
    lines = [" ".join(words[k : k + 7]) for k in range(0, len(words), 7)]
    return "\n\n".join(lines).upper().replace(" ", "   ")


def planted(corpus, tokenizer) -> tuple[list, list]:
    """Token documents (id, ids): 20 code, then 20 prose and planted copies of the code: a few tokens
    changed, cut short, re-wrapped and upper-cased, an exact copy; and shared boilerplate (not a copy)."""
    code, prose = corpus["code"], corpus["prose"]
    rng = np.random.default_rng(1)
    edited = list(code[3][1])
    for k in rng.choice(len(edited), size=4, replace=False):
        edited[int(k)] = 1000 + int(k)  # a few tokens changed
    reformat = tokenizer.encode_batch([reformatted(tokenizer.decode(code[9][1]))])[0]
    a = code[:20]
    b = [
        *prose[:20],
        ("edit", edited),
        ("trunc", list(code[5][1])[: int(len(code[5][1]) * 0.93)]),  # syndicated copy cut short
        ("reformat", reformat),
        ("copy", list(code[11][1])),
        ("header", list(code[7][1])[:300] + list(prose[25][1])),  # shared boilerplate, other body
    ]
    return a, b


def test_near_clusters_match_brute_force(corpus, tokenizer, tmp_path):
    a_docs, b_docs = planted(corpus, tokenizer)
    a = write_shard(tmp_path / "a.npy", a_docs)
    b = write_shard(tmp_path / "b.npy", b_docs)
    mix = write_mix(tmp_path / "mix.txt", [("code", str(a)), ("prose", str(b))])
    out = tmp_path / "r.json"
    argv = ["audit", "dedup", "--mix", mix, "--out", str(out), "--work-dir", str(tmp_path), "--near"]
    argv += ["--tokenizer", tokenizer.path, "--max-repeated-span-frac", "1", "--max-dup-doc-frac", "1"]
    assert main([*argv, "--max-near-dup-frac", "0.2"]) == 0
    near = json.loads(out.read_text())["near_duplicates"]
    docs = [(i, tokenizer.decode(t)) for i, t in a_docs + b_docs if len(t) + 1 >= 32]
    want = brute_clusters(docs)
    assert {c["keep"]: c["doc_ids"] for c in near["clusters"]} == want
    assert {m for c in near["clusters"] for m in c["doc_ids"]} >= {"edit", "trunc", "reformat", "copy"}
    assert all("header" not in c["doc_ids"] for c in near["clusters"])
    texts = dict(docs)
    for c in near["clusters"]:
        keep = grams(texts[c["keep"]])
        sims = [len(keep & grams(texts[m])) / len(keep | grams(texts[m])) for m in c["doc_ids"][1:]]
        assert c["jaccard_min"] == round(min(sims), 6)
    ntok = {i: len(t) + 1 for i, t in a_docs + b_docs}
    removable = sum(ntok[m] for c in near["clusters"] for m in c["doc_ids"][1:])
    assert near["removable_tokens"] == removable
    frac = near["removable_token_frac"]
    # the gate
    assert main([*argv, "--max-near-dup-frac", str(frac - 0.001)]) == 1


def test_near_needs_the_tokenizer(corpus, tmp_path, capsys):
    a = write_shard(tmp_path / "a.npy", corpus["code"][:3])
    mix = write_mix(tmp_path / "mix.txt", [("code", str(a))])
    assert main(["audit", "dedup", "--mix", mix, "--out", str(tmp_path / "r.json"), "--near"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("olmax: error:") and "--tokenizer" in err[0]
    assert not (tmp_path / "r.json").exists()


def test_audit_finds_what_prepare_removes(tokenizer, tmp_path):
    """The same documents (every planted kind) prepared without dedup and audited with --near, and
    prepared with --dedup minhash: the audit's clusters are prepare's removals, cluster for cluster."""
    base = [(i, t[:5000]) for i, t in stdlib_texts(40, start=20) if len(t) > 1500]
    rng = np.random.default_rng(3)
    docs = list(base[:30])
    for k, (i, t) in enumerate(base[:8]):
        w = t.split(" ")
        if k % 4 == 0:
            docs.append((f"{i}~reformat", reformatted(t)))
        elif k % 4 == 1:
            full = [j for j, x in enumerate(w) if x.isalpha()]
            for j in rng.choice(full, size=max(1, len(full) // 40), replace=False):
                w[int(j)] = "edited"  # one word in 40 changed
            docs.append((f"{i}~edit", " ".join(w)))
        elif k % 4 == 2:
            docs.append((f"{i}~trunc", t[: int(len(t) * 0.92)]))
        else:
            docs.append((f"{i}~copy", t))
    docs.append(("header", base[9][1][:800] + base[10][1][1000:]))  # boilerplate, another body
    docs.append((f"{base[0][0]}~copy2", base[0][1]))  # a second copy: a three-member cluster
    write_jsonl(tmp_path / "raw" / "a.jsonl", docs[:25])
    write_jsonl(tmp_path / "raw" / "b.jsonl", docs[25:])
    srcs = [f"a={tmp_path}/raw/a.jsonl", f"b={tmp_path}/raw/b.jsonl"]
    prep = ["data", "prepare", "--no-progress", "--tokenizer", tokenizer.path]
    assert main([*prep, "--out", str(tmp_path / "plain"), *srcs]) == 0
    assert main([*prep, "--out", str(tmp_path / "dd"), "--dedup", "minhash", *srcs]) == 0
    out = tmp_path / "r.json"
    argv = ["audit", "dedup", "--mix", str(tmp_path / "plain" / "mix.txt"), "--out", str(out), "--near"]
    main([*argv, "--work-dir", str(tmp_path), "--min-doc-tokens", "1"])  # tokenizer from the manifest
    near = json.loads(out.read_text())["near_duplicates"]
    audit = {c["keep"]: sorted(c["doc_ids"][1:]) for c in near["clusters"]}
    removed: dict[str, list[str]] = {}
    for line in (tmp_path / "dd" / "removed.jsonl").read_text().splitlines():
        r = json.loads(line)
        removed.setdefault(r["kept"], []).append(r["id"])
    assert audit == {k: sorted(v) for k, v in removed.items()}
    planted_ids = {i for i, _ in docs if "~" in i}
    assert {m for v in audit.values() for m in v} == planted_ids  # every kind, nothing else
    assert near["tokenizer"] == tokenizer.path


def test_loader_reports_near_duplicate_exposure(corpus, tokenizer, tmp_path):
    a_docs, b_docs = planted(corpus, tokenizer)
    a = write_shard(tmp_path / "a.npy", a_docs)
    b = write_shard(tmp_path / "b.npy", b_docs)
    mix = write_mix(tmp_path / "mix.txt", [("code", str(a)), ("prose", str(b)), ("prose", str(b))])
    out = tmp_path / "r.json"
    argv = ["audit", "loader", "--mix", mix, "--seq-len", "64", "--global-batch-size", "4"]
    argv += ["--near", "--tokenizer", tokenizer.path, "--no-content"]
    rc = main([*argv, "--work-dir", str(tmp_path / "w"), "--out", str(out)])
    report = json.loads(out.read_text())
    near = report["near_duplicates"]
    assert near["removable_documents"] >= 4
    # b is listed twice: its removable tokens are planned twice
    assert near["planned_removable_tokens"] == 2 * near["removable_tokens"]
    frac = near["planned_removable_tokens"] / near["planned_tokens"]
    assert report["checks"]["near_duplicate_exposure"]["value"] == round(frac, 6)
    assert rc == 1 and not report["checks"]["near_duplicate_exposure"]["ok"]  # above the 5% default


def test_audit_gates_on_removed_share_and_cluster_size(corpus, tokenizer, tmp_path, capsys):
    a_docs, b_docs = planted(corpus, tokenizer)
    a = write_shard(tmp_path / "a.npy", a_docs)
    b = write_shard(tmp_path / "b.npy", b_docs)
    mix = write_mix(tmp_path / "mix.txt", [("code", str(a)), ("prose", str(b))])
    out = tmp_path / "r.json"
    argv = ["audit", "dedup", "--mix", mix, "--out", str(out), "--work-dir", str(tmp_path), "--near"]
    argv += ["--tokenizer", tokenizer.path, "--max-repeated-span-frac", "1", "--max-dup-doc-frac", "1"]
    argv += ["--max-near-dup-frac", "1"]
    assert main([*argv, "--max-removed-frac", "1", "--max-cluster-size", "2"]) == 0
    report = json.loads(out.read_text())
    near = report["near_duplicates"]
    prose = near["sources"]["prose"]
    removed = prose["stages"]["near"]
    assert removed["documents"] == 4 and near["sources"]["code"]["stages"]["near"]["documents"] == 0
    share = round(max(removed["documents"] / prose["documents"], removed["tokens"] / prose["tokens"]), 6)
    assert report["checks"]["removed_frac[near/prose]"]["value"] == share
    assert near["largest_cluster"] == 2 and report["checks"]["max_cluster_size"]["ok"]
    code = dict(corpus["code"])
    first = next(
        x.strip() for x in tokenizer.decode(code[near["clusters"][0]["keep"]]).splitlines() if x.strip()
    )
    assert near["clusters"][0]["first_lines"][0] == first[:200]
    assert any("biggest near-duplicate clusters" in x for x in report["summary"])
    capsys.readouterr()
    # failing gates: exit 1, the report written
    out.unlink()
    assert main([*argv, "--max-removed-frac", f"prose={share - 0.01}", "--max-cluster-size", "1"]) == 1
    report = json.loads(out.read_text())
    assert not report["checks"]["removed_frac[near/prose]"]["ok"] and not report["ok"]
    assert "removed_frac[near/code]" not in report["checks"]  # no limit given for code
    assert not report["checks"]["max_cluster_size"]["ok"]
    # a gate without --near, a source not in the mix: one error line, no report
    out.unlink()
    plain = [x for x in argv if x != "--near"]
    assert main([*plain, "--max-cluster-size", "3"]) == 2
    assert main([*argv, "--max-removed-frac", "news=0.1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(x.startswith("olmax: error:") for x in err) and not out.exists()


def test_near_streams_runs_of_documents_to_the_work_dir_and_leaves_nothing(
    corpus, tokenizer, tmp_path, monkeypatch
):
    """--near streams: runs of about CHUNK_TOKENS tokens are shingled on the threads, each reaches the
    scratch tables (in --work-dir) before more than threads + 1 runs are started, and the scratch folder is
    gone after the report; the clusters are those of one run a file (the same documents, the same order)."""
    import olmax.audit.near as near_mod
    from olmax.dedup import minhash_spill

    a_docs, b_docs = planted(corpus, tokenizer)
    files = [write_shard(tmp_path / f"s{k}.npy", (a_docs + b_docs)[k::3]) for k in range(3)]
    mix = write_mix(tmp_path / "mix.txt", [("code", str(f)) for f in files])
    work = tmp_path / "work"
    argv = ["audit", "dedup", "--mix", mix, "--work-dir", str(work), "--near", "--threads", "2"]
    argv += ["--tokenizer", tokenizer.path, "--max-repeated-span-frac", "1", "--max-dup-doc-frac", "1"]
    argv += ["--max-near-dup-frac", "1"]
    assert main([*argv, "--out", str(tmp_path / "whole.json")]) == 0
    started, added, dirs = [], [], []
    shingled, add = near_mod._shingled, minhash_spill.SpilledTables.add

    def shingling(*a):
        started.append(1)
        return shingled(*a)

    def adding(self, *a):
        dirs.append(self.dir)
        added.append(len(started))
        return add(self, *a)

    monkeypatch.setattr(near_mod, "CHUNK_TOKENS", 3000)
    monkeypatch.setattr(near_mod, "_shingled", shingling)
    monkeypatch.setattr(minhash_spill.SpilledTables, "add", adding)
    assert main([*argv, "--out", str(tmp_path / "runs.json")]) == 0
    assert len(added) > 2 * len(files)  # several runs a file
    assert all(n <= k + 3 for k, n in enumerate(added, start=1))  # at most threads + 1 ahead
    assert {str(work)} == {d.rsplit("/", 1)[0] for d in dirs}
    assert not any(p.name.startswith(minhash_spill.SCRATCH_PREFIX) for p in work.rglob("*"))
    whole, runs = (
        json.loads((tmp_path / f).read_text())["near_duplicates"] for f in ("whole.json", "runs.json")
    )
    assert runs == whole and runs["clusters"]
