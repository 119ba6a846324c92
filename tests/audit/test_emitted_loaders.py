"""`olmax audit stream` on what other loaders really emit over a real mix (dolma2 tokens of stdlib and
pydoc text, one shard listed twice): OLMo-core's NumpyFSLDataLoader on two ranks (clean; both hosts
given rank 0; a resume from an earlier batch), Grain pipelines written as a MaxText user would (a
per-host shuffle seed; a shard count that is the device count), and a reader that cuts one file's
windows one token late. Each host's rows are dumped as (steps, rows, L) .npy and audited through the
CLI; the truth is computed here from each loader's own instance indices and its own reader, with no
olmax code, and every count must equal it exactly."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from olmax.cli import main
from tests.audit.audit_testdata import write_mix
from tests.data.loader_testdata import olmo_core_loader

L, R, P, SEED = 64, 4, 2, 5  # rows per host per step; G = P * R = 8 rows per global step
G = P * R
COUNTS = (
    "rows",
    "distinct_rows",
    "repeated_rows",
    "unplanned_repeated_rows",
    "instances_never_seen",
    "foreign_rows",
    "cross_host_rows",
    "cross_host_contents",
    "unplanned_cross_host_rows",
)


@pytest.fixture(scope="module")
def mix(corpus, tmp_path_factory):
    root = tmp_path_factory.mktemp("loaders")
    s = corpus["shards"]
    paths = [s["code-0"], s["code-1"], s["prose-0"], s["prose-0"]]  # prose planned twice per epoch
    labels = ["code", "code", "prose", "prose"]
    return {"root": root, "paths": paths, "mix": write_mix(root / "mix.txt", list(zip(labels, paths)))}


def windows(paths: list[str], shift: dict[str, int] | None = None) -> list[np.ndarray]:
    """A reader written here: each listed file's L-token windows in mix order (tail dropped), each
    starting `shift[path]` tokens late (0: the mix's own instances)."""
    out = []
    for p in paths:
        tokens = np.fromfile(p, dtype=np.uint32)
        k = (shift or {}).get(p, 0)
        out += [tokens[k + w * L : k + (w + 1) * L] for w in range((tokens.size - k) // L)]
    return out


def truth(keys: list[np.ndarray], universe: list[bytes]) -> dict:
    """Every count of the report from the content each row must hold (keys[host][step, row]: bytes)."""
    rows = [(h, s, key) for h, k in enumerate(keys) for s in range(k.shape[0]) for key in k[s]]
    planned = Counter(universe)
    seen = Counter(key for *_, key in rows)
    per_epoch = len(universe) // G  # a content may appear planned[c] times per epoch of N // G steps
    by_epoch = Counter((s // per_epoch, key) for _, s, key in rows)
    hosts_at, copies = {}, Counter((s, key) for _, s, key in rows)
    for h, s, key in rows:
        hosts_at.setdefault((s, key), set()).add(h)
    cross = [(s, key) for h, s, key in rows if len(hosts_at[(s, key)]) > 1]
    return {
        "rows": len(rows),
        "distinct_rows": len(seen),
        "repeated_rows": len(rows) - len(seen),
        "unplanned_repeated_rows": sum(
            max(0, n - planned[key]) for (_, key), n in by_epoch.items() if key in planned
        ),
        "instances_never_seen": sum(max(0, n - seen[key]) for key, n in planned.items()),
        "foreign_rows": sum(n for key, n in seen.items() if key not in planned),
        "cross_host_rows": len(cross),
        "cross_host_contents": len({key for _, key in cross}),
        # copies in one step beyond the mix instances holding the content (its planned copies)
        "unplanned_cross_host_rows": sum(copies[c] > planned[c[1]] for c in cross),
    }


def audit(mix: dict, hosts: list[np.ndarray], tmp_path, name: str) -> tuple[int, dict]:
    """Dump each host's (steps, rows, L) int32 rows as .npy and run `olmax audit stream` on them."""
    paths = []
    for h, arr in enumerate(hosts):
        assert arr.ndim == 3 and arr.shape[1:] == (R, L)
        paths.append(str(tmp_path / f"{name}-host{h}.npy"))
        np.save(paths[-1], arr.astype(np.int32))
    out = tmp_path / f"{name}.json"
    code = main(
        ["audit", "stream", "--mix", mix["mix"], "--seq-len", str(L), "--batches", *paths, "--out", str(out)]
    )
    return code, json.loads(out.read_text())


def counts(report: dict) -> dict:
    return {k: report[k] for k in COUNTS}


def as_keys(rows: np.ndarray) -> np.ndarray:
    """(steps, rows) bytes of (steps, rows, L) token rows."""
    flat = [r.astype(np.uint32).tobytes() for r in rows.reshape(-1, L)]
    return np.asarray(flat, dtype=object).reshape(rows.shape[:2])


# -- OLMo-core ---------------------------------------------------------------------------------------


def olmo_core_stream(
    mix: dict,
    rank: int,
    work: str,
    *,
    steps: int | None = None,
    state: dict | None = None,
    save_at: int | None = None,
) -> dict:
    """One rank's batches of epoch 1 from OLMo-core's NumpyFSLDataLoader (2 ranks), from `state` if
    given, at most `steps` of them; with the loader's instance indices, its dataset, and its state
    after `save_at` batches."""
    loader = olmo_core_loader(mix["paths"], L, G, SEED, work, dp_world_size=P, dp_rank=rank)
    if state is not None:
        loader.load_state_dict(state)
    loader.reshuffle(epoch=1)
    ids, index, saved = [], [], None
    for batch in loader:
        ids.append(batch["input_ids"].numpy().astype(np.int32))
        index.append(batch["index"].numpy().astype(np.int64))
        if loader.batches_processed == save_at:
            saved = loader.state_dict()
        if steps is not None and len(ids) == steps:
            break
    return {"ids": np.stack(ids), "index": np.stack(index), "dataset": loader.dataset, "state": saved}


def olmo_core_truth_keys(stream: dict) -> np.ndarray:
    """The content each row must hold, from the loader's own index and dataset; checked against the rows."""
    ds = stream["dataset"]
    keys = np.asarray(
        [
            [ds[int(i)]["input_ids"].numpy().astype(np.uint32).tobytes() for i in step]
            for step in stream["index"]
        ],
        dtype=object,
    )
    assert (keys == as_keys(stream["ids"])).all(), "the loader's rows are not its indexed instances"
    return keys


def olmo_core_universe(ds) -> list[bytes]:
    return [ds[i]["input_ids"].numpy().astype(np.uint32).tobytes() for i in range(len(ds))]


@pytest.fixture(scope="module")
def olmo_core(mix, tmp_path_factory):
    work = str(tmp_path_factory.mktemp("oc"))
    ranks = [olmo_core_stream(mix, r, work) for r in range(P)]
    return {"work": work, "ranks": ranks, "universe": olmo_core_universe(ranks[0]["dataset"])}


def test_olmo_core_two_ranks_clean(mix, olmo_core, tmp_path):
    ranks, universe = olmo_core["ranks"], olmo_core["universe"]
    assert len(universe) == 1618 and ranks[0]["ids"].shape[0] == len(universe) // G
    want = truth([olmo_core_truth_keys(r) for r in ranks], universe)
    code, rep = audit(mix, [r["ids"] for r in ranks], tmp_path, "oc-clean")
    assert counts(rep) == want
    assert code == 0 and rep["ok"] and rep["covers_epoch"]
    # the prose shard listed twice: its content comes twice per epoch, as planned
    assert want["repeated_rows"] > 0 and want["unplanned_repeated_rows"] == 0
    assert want["instances_never_seen"] == len(universe) % G  # the epoch's dropped tail
    assert want["foreign_rows"] == want["cross_host_rows"] == 0


def test_olmo_core_both_hosts_given_rank_0(mix, olmo_core, tmp_path):
    rank0 = olmo_core["ranks"][0]
    hosts = [rank0, rank0]  # the second host was launched with dp_rank=0 too: the same rows
    want = truth([olmo_core_truth_keys(r) for r in hosts], olmo_core["universe"])
    code, rep = audit(mix, [r["ids"] for r in hosts], tmp_path, "oc-rank0")
    assert counts(rep) == want
    assert code == 1 and not rep["ok"]
    assert want["cross_host_rows"] == want["rows"]  # every row is on both hosts in its step
    assert want["cross_host_contents"] == want["distinct_rows"]
    # a prose window's two copies on two hosts in one step are what the mix plans (it lists prose twice);
    # every other cross-host row is not
    assert 0 < want["unplanned_cross_host_rows"] < want["cross_host_rows"]
    assert rep["checks"]["unplanned_cross_host_rows"]["ok"] is False


def test_olmo_core_resume_from_an_earlier_batch(mix, olmo_core, tmp_path):
    # Each rank runs 12 batches and saves its loader state after batch 8 and after batch 12; the
    # trainer resumes at step 12 but restores the data loader state of batch 8 (the stale checkpoint),
    # then runs to the end of the epoch: steps 12..15 hold batches 8..11 again.
    n = olmo_core["ranks"][0]["ids"].shape[0]
    hosts = []
    for r in range(P):
        first = olmo_core_stream(mix, r, olmo_core["work"], steps=12, save_at=8)
        rest = olmo_core_stream(mix, r, olmo_core["work"], state=first["state"], steps=n - 12)
        assert first["state"]["batches_processed"] == 8
        hosts.append(
            {
                "ids": np.concatenate([first["ids"], rest["ids"]]),
                "index": np.concatenate([first["index"], rest["index"]]),
                "dataset": first["dataset"],
            }
        )
    np.testing.assert_array_equal(hosts[0]["index"][12:16], hosts[0]["index"][8:12])
    want = truth([olmo_core_truth_keys(h) for h in hosts], olmo_core["universe"])
    code, rep = audit(mix, [h["ids"] for h in hosts], tmp_path, "oc-replay")
    assert counts(rep) == want
    assert code == 1 and want["unplanned_repeated_rows"] >= 4 * G
    # the last 4 batches of the epoch were never emitted
    clean = truth([olmo_core_truth_keys(r) for r in olmo_core["ranks"]], olmo_core["universe"])
    assert want["instances_never_seen"] > clean["instances_never_seen"]
    replayed = {(p["host"], p["step"]) for e in rep["repeats"] for p in e["positions"]}
    assert {(h, s) for h in range(P) for s in range(12, 16)} <= replayed


# -- Grain, written the way a MaxText user would -------------------------------------------------------


class WindowSource:
    """A random-access source over a mix's instance windows (a user's own reader): tokens and index."""

    def __init__(self, wins: list[np.ndarray]):
        self.wins = wins

    def __len__(self) -> int:
        return len(self.wins)

    def __getitem__(self, i: int) -> dict:
        return {"tokens": self.wins[i].astype(np.int32), "index": np.int64(i)}


def grain_truth(hosts: list[dict], source: WindowSource, universe: list[bytes]) -> dict:
    keys = []
    for h in hosts:
        k = np.asarray([[source.wins[int(i)].tobytes() for i in step] for step in h["index"]], dtype=object)
        assert (k == as_keys(h["tokens"])).all(), "the pipeline's rows are not its indexed windows"
        keys.append(k)
    return truth(keys, universe)


def trim(hosts: list[dict], steps: int | None = None) -> list[dict]:
    """Stop every host at the same step (the trainer's step count), as a training run does."""
    n = min(min(h["index"].shape[0] for h in hosts), steps or 1 << 62)
    return [{k: v[:n] for k, v in h.items()} for h in hosts]


def stacked(batches) -> dict:
    """One host's emitted batches as (steps, R, L) tokens and (steps, R) source indices."""
    batches = list(batches)
    return {
        "tokens": np.stack([b["tokens"] for b in batches]),
        "index": np.stack([b["index"] for b in batches]),
    }


def grain_map_hosts(source, seed_of_host) -> list[dict]:
    """Each host's batches from a Grain MapDataset pipeline: shuffle, take every P-th, batch, trimmed."""
    import grain

    return trim(
        [
            stacked(
                grain.MapDataset.source(source)
                .shuffle(seed=seed_of_host(host))[host::P]
                .batch(R, drop_remainder=True)
            )
            for host in range(P)
        ]
    )


def test_grain_per_host_seed(mix, tmp_path):
    source = WindowSource(windows(mix["paths"]))
    universe = [w.tobytes() for w in source.wins]
    hosts = grain_map_hosts(source, lambda host: SEED + host)  # the bug: the hosts shuffle differently
    want = grain_truth(hosts, source, universe)
    code, rep = audit(mix, [h["tokens"] for h in hosts], tmp_path, "grain-seed")
    assert counts(rep) == want
    assert code == 1 and want["unplanned_repeated_rows"] > 0
    # about half of what host 1 emits host 0 emits too; as many instances are never seen
    assert want["instances_never_seen"] > len(universe) // 8
    # the same pipeline with one seed is clean (planned prose copies only)
    same = grain_map_hosts(source, lambda host: SEED)
    code, rep = audit(mix, [h["tokens"] for h in same], tmp_path, "grain-clean")
    clean = grain_truth(same, source, universe)
    assert counts(rep) == clean and code == 0
    # two planned copies of a prose window may share a step on two hosts: counted, not gated
    assert clean["unplanned_cross_host_rows"] == 0 and clean["unplanned_repeated_rows"] == 0


def test_grain_shard_count_is_the_device_count(mix, tmp_path):
    import grain

    source = WindowSource(windows(mix["paths"]))
    universe = [w.tobytes() for w in source.wins]
    devices = 4  # two processes of two devices: shard_count=jax.device_count() instead of process_count
    steps = len(universe) // G  # the trainer runs one epoch's worth of steps
    hosts = []
    for host in range(P):
        sampler = grain.samplers.IndexSampler(
            len(source),
            shard_options=grain.sharding.ShardOptions(
                shard_index=host, shard_count=devices, drop_remainder=True
            ),
            shuffle=True,
            num_epochs=None,
            seed=SEED,
        )
        loader = grain.DataLoader(
            data_source=source,
            sampler=sampler,
            worker_count=0,
            operations=[grain.transforms.Batch(R, drop_remainder=True)],
        )
        it = iter(loader)
        hosts.append(stacked(next(it) for _ in range(steps)))
    want = grain_truth(hosts, source, universe)
    code, rep = audit(mix, [h["tokens"] for h in hosts], tmp_path, "grain-shards")
    assert counts(rep) == want
    assert code == 1
    # shards 2 and 3 (half the mix) are never read; shards 0 and 1 are read twice (the sampler's
    # second epoch) within the trainer's first
    emitted = np.unique(np.concatenate([h["index"].reshape(-1) for h in hosts]))
    assert emitted.size == 2 * (len(universe) // devices) and want["rows"] == 2 * emitted.size
    assert want["instances_never_seen"] > len(universe) // 4 and want["unplanned_repeated_rows"] > 0


# -- a misaligned reader ---------------------------------------------------------------------------------


def test_reader_with_one_file_a_token_late(mix, tmp_path):
    prose = mix["paths"][2]
    source = WindowSource(windows(mix["paths"], shift={prose: 1}))  # e.g. a BOS strip on one file
    universe = [w.tobytes() for w in windows(mix["paths"])]
    hosts = grain_map_hosts(source, lambda host: SEED)
    want = grain_truth(hosts, source, universe)
    code, rep = audit(mix, [h["tokens"] for h in hosts], tmp_path, "late")
    assert counts(rep) == want
    assert code == 1 and want["foreign_rows"] > 100
    # every foreign row is a prose window read late, placed at the first offset of the prose file that
    # holds its text (pydoc repeats some passages, so that is one token late or an earlier copy)
    assert rep["foreign_kinds"] == {"misaligned": want["foreign_rows"], "corrupted": 0, "unknown": 0}
    tokens = np.fromfile(prose, dtype=np.uint32)
    first = {}
    for off in range(tokens.size - L + 1):
        first.setdefault(tokens[off : off + L].tobytes(), off)
    for e in rep["foreign"]:
        row = hosts[e["host"]]["tokens"][e["step"], e["row"]].astype(np.uint32).tobytes()
        assert (e["file"], e["offset"], e["shift"]) == (prose, first[row], first[row] % L), e
    assert sum(e["shift"] == 1 for e in rep["foreign"]) > 0.9 * want["foreign_rows"]
