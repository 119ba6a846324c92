"""`olmax audit stream` on emitted streams whose truth is computed here by brute force: olmax's own
two-host stream (clean), a step replayed after a fake resume, hosts that double-shard (both emit
the same half), and a misaligned window."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from olmax.audit.emitted import StreamConfig, audit_stream
from olmax.cli import main
from olmax.data.index import open_index
from olmax.data.loader import Loader
from olmax.data.stream import StreamSpec
from olmax.data.tokenfile import read_tokens
from tests.audit.audit_testdata import write_mix

L, G, SEED, P = 64, 8, 3, 2


@pytest.fixture(scope="module")
def setup(corpus, tmp_path_factory):
    root = tmp_path_factory.mktemp("stream")
    s = corpus["shards"]
    mix = write_mix(root / "mix.txt", [("code", s["code-0"]), ("code", s["code-1"]), ("prose", s["prose-0"])])
    index = open_index(mix, L)
    cfg = StreamSpec(seq_len=L, global_batch_size=G, seed=SEED, work_dir=str(root / "w"), num_threads=0)
    loaders = [Loader(index, cfg, process_index=r, process_count=P) for r in range(P)]
    bpe = loaders[0].batches_per_epoch
    hosts = [np.stack([ld.batch(1, k)["input_ids"] for k in range(bpe)]) for ld in loaders]
    windows = [
        read_tokens(p)[w * L : (w + 1) * L] for p in index.paths for w in range(len(read_tokens(p)) // L)
    ]
    return {"root": root, "mix": mix, "index": index, "hosts": hosts, "bpe": bpe, "windows": windows}


def truth(hosts, windows):
    """The counts, from bytes, with no olmax code."""
    rows = [
        (h, s, r, arr[s, r].astype(np.uint32).tobytes())
        for h, arr in enumerate(hosts)
        for s in range(arr.shape[0])
        for r in range(arr.shape[1])
    ]
    inst = Counter(w.tobytes() for w in windows)
    seen = Counter(b for *_, b in rows)
    cross, unplanned_cross, shared = 0, 0, set()
    for s in range(hosts[0].shape[0]):
        hosts_of, copies = {}, Counter()
        for h, ss, _, b in rows:
            if ss == s:
                hosts_of.setdefault(b, set()).add(h)
                copies[b] += 1
        for _h, ss, _, b in rows:  # every copy of a content two hosts emitted in this step
            if ss == s and len(hosts_of[b]) > 1:
                cross += 1
                unplanned_cross += copies[b] > inst[b]
                shared.add(b)
    return {
        "rows": len(rows),
        "distinct_rows": len(seen),
        "repeated_rows": len(rows) - len(seen),
        "foreign_rows": sum(n for b, n in seen.items() if b not in inst),
        "instances_never_seen": sum(max(0, n - seen[b]) for b, n in inst.items()),
        "unplanned_repeated_rows": sum(max(0, n - inst[b]) for b, n in seen.items() if b in inst),
        "cross_host_rows": cross,
        "cross_host_contents": len(shared),
        "unplanned_cross_host_rows": unplanned_cross,
    }


def run(setup, hosts, tmp_path, name):
    paths = []
    for h, arr in enumerate(hosts):
        paths.append(str(tmp_path / f"{name}-host{h}.npy"))
        np.save(paths[-1], arr)
    return audit_stream(
        StreamConfig(StreamSpec(mix=setup["mix"], seq_len=L, work_dir=str(tmp_path)), batches=tuple(paths))
    ), paths


def check(rep, want):
    assert {k: rep[k] for k in want} == want


def test_clean_two_host_stream(setup, tmp_path):
    rep, _ = run(setup, setup["hosts"], tmp_path, "clean")
    want = truth(setup["hosts"], setup["windows"])
    check(rep, want)
    assert rep["ok"] and rep["covers_epoch"]
    assert rep["repeated_rows"] == 0 and rep["foreign_rows"] == 0
    assert rep["instances_never_seen"] == setup["index"].num_instances - setup["bpe"] * G


def test_replayed_step_after_fake_resume(setup, tmp_path):
    k = 5  # the trainer resumed at step 5 but the loader served step 4 again; same number of steps
    hosts = [np.concatenate([a[:k], a[k - 1 : k], a[k:-1]]) for a in setup["hosts"]]
    rep, _ = run(setup, hosts, tmp_path, "replay")
    want = truth(hosts, setup["windows"])
    check(rep, want)
    assert rep["repeated_rows"] == G and rep["unplanned_repeated_rows"] == G and not rep["ok"]
    ex = rep["repeats"][0]
    assert sorted({p["step"] for p in ex["positions"]}) == [k - 1, k]


def test_double_sharded_hosts(setup, tmp_path):
    hosts = [setup["hosts"][0], setup["hosts"][0].copy()]  # both hosts emit host 0's half
    rep, _ = run(setup, hosts, tmp_path, "double")
    check(rep, truth(hosts, setup["windows"]))
    # both copies of each of host 0's rows count; each content once
    assert rep["cross_host_rows"] == setup["bpe"] * G and rep["cross_host_contents"] == setup["bpe"] * G // P
    assert not rep["ok"]


def test_cross_host_rows_count_every_copy_and_contents_once(setup, tmp_path):
    hosts = [a.copy() for a in setup["hosts"]]
    hosts[1][2, 0] = hosts[0][2, 1]  # step 2: one content on host 0 once and on host 1 twice
    hosts[1][2, 1] = hosts[0][2, 1]
    hosts[1][5, 3] = hosts[0][5, 0]  # step 5: another content, once on each host
    hosts[1][6, 2] = hosts[0][4, 2]  # different steps: a repeat, not a cross-host row
    rep, _ = run(setup, hosts, tmp_path, "cross")
    check(rep, truth(hosts, setup["windows"]))
    assert rep["cross_host_rows"] == 3 + 2 and rep["cross_host_contents"] == 2
    assert "every copy counted" in rep["definitions"]["cross_host_rows"]
    assert rep["unplanned_cross_host_rows"] == 5 and not rep["ok"]  # no path is listed twice here
    line = next(x for x in rep["summary"] if " cross_host_rows:" in x)
    assert "every copy counted" in line and "2 distinct" in line
    assert any(x.lstrip().startswith("FAIL unplanned_cross_host_rows: 5") for x in rep["summary"])


def test_misaligned_window_is_foreign(setup, tmp_path, capsys):
    hosts = [a.copy() for a in setup["hosts"]]
    index = setup["index"]
    for s, r in ((3, 0), (7, 2)):  # read one token late
        f, start = index.locate(np.asarray([0]))
        inst = Loader(
            index,
            StreamSpec(seq_len=L, global_batch_size=G, seed=SEED, work_dir=str(setup["root"] / "w")),
            process_index=1,
            process_count=P,
        ).instance_ids(1, s)[r]
        f, start = index.locate(np.asarray([inst]))
        toks = read_tokens(index.paths[int(f[0])])
        hosts[1][s, r] = toks[int(start[0]) + 1 : int(start[0]) + 1 + L]
    hosts[0][2, 1, 40] += 1  # a bad read in the middle of a row
    hosts[0][4, 0] = np.random.default_rng(0).integers(0, 100_000, size=L)  # not from the mix at all
    rep, paths = run(setup, hosts, tmp_path, "shifted")
    check(rep, truth(hosts, setup["windows"]))
    assert rep["foreign_rows"] == 4
    kinds = {(e["host"], e["step"], e["row"]): e["kind"] for e in rep["foreign"]}
    assert kinds == {
        (1, 3, 0): "misaligned",
        (1, 7, 2): "misaligned",
        (0, 2, 1): "corrupted",
        (0, 4, 0): "unknown",
    }
    assert rep["foreign_kinds"] == {"misaligned": 2, "corrupted": 1, "unknown": 1}
    assert {e["shift"] for e in rep["foreign"] if e["kind"] == "misaligned"} == {1}
    out = tmp_path / "r.json"
    assert (
        main(
            [
                "audit",
                "stream",
                "--mix",
                setup["mix"],
                "--seq-len",
                str(L),
                "--batches",
                *paths,
                "--out",
                str(out),
            ]
        )
        == 1
    )
    assert json.loads(out.read_text())["foreign_rows"] == 4
    assert "FAIL foreign_rows" in capsys.readouterr().out


def test_bad_batches_file_is_a_clear_error(setup, tmp_path):
    from olmax.errors import OlmaxError

    bad = tmp_path / "bad.npy"
    np.save(bad, np.zeros((2, 3), np.int32))
    with pytest.raises(OlmaxError, match="expected a \\(steps, rows, 64\\)"):
        audit_stream(StreamConfig(StreamSpec(mix=setup["mix"], seq_len=L), batches=(str(bad),)))


def test_sharded_twice_stream(setup, tmp_path):
    # Host r's sampler already holds positions r::P of each global batch; a second layer then keeps
    # elements r::P of that host stream, so each host reads two global batches per emitted step.
    hosts = []
    for r, a in enumerate(setup["hosts"]):
        flat = a.reshape(-1, L)[r::P]
        steps = flat.shape[0] // a.shape[1]
        hosts.append(flat[: steps * a.shape[1]].reshape(steps, a.shape[1], L))
    rep, _ = run(setup, hosts, tmp_path, "twice")
    want = truth(hosts, setup["windows"])
    check(rep, want)
    assert rep["instances_never_seen"] >= setup["index"].num_instances // 2 and not rep["covers_epoch"]
