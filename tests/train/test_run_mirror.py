"""olmax.train.run_mirror on fsspec's memory:// store: a step is complete in the bucket only with its seal and
every file it lists; a push cut short is never read and is finished by the next push; the bucket keeps the
newest `keep` steps; a pull brings the complete steps wanted and the run's changed files, and leaves the
watcher's own evals/ alone."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import fsspec
import pytest

from olmax.errors import OlmaxError
from olmax.train.checkpoint import COMMIT_MARKER, SEAL, complete_steps, seal
from olmax.train.run_mirror import RunMirror, is_remote_run, staging_folder


def make_step(run: Path, step: int, payload: bytes = b"") -> Path:
    """A complete local checkpoint step as the trainer leaves it: arrays, Orbax's marker, olmax's seal."""
    folder = run / "checkpoints" / str(step)
    (folder / "state" / "d").mkdir(parents=True)
    (folder / "state" / "d" / "arrays").write_bytes(payload or f"arrays of step {step}".encode() * 50)
    (folder / "meta").mkdir()
    (folder / "meta" / "metadata").write_text(json.dumps({"step": step}))
    (folder / COMMIT_MARKER).write_text("ok")
    seal(folder)
    return folder


@pytest.fixture
def url():
    u = f"memory://runs-{uuid.uuid4().hex[:8]}/run"
    yield u
    fs = fsspec.filesystem("memory")
    if fs.exists(u):
        fs.rm(u, recursive=True)


def objects(url: str) -> set[str]:
    fs, root = fsspec.core.url_to_fs(url)
    return {p[len(root) + 1 :] for p in fs.find(root)} if fs.exists(root) else set()


def test_push_then_pull_on_another_machine(url, tmp_path):
    a = RunMirror(url, "train", tmp_path / "a")
    for s in (2, 4, 6):
        make_step(a.local, s)
    (a.local / "config.yaml").write_text("name: x\n")
    (a.local / "metrics.jsonl").write_text('{"step": 1}\n')
    assert a.push(keep=2) == [2, 4, 6]
    assert a.complete_remote_steps() == [6, 4]  # the bucket's retention: the newest two
    assert {"config.yaml", "metrics.jsonl"} <= objects(url)
    assert not any(o.startswith(".olmax") for o in objects(url))

    b = RunMirror(url, "watch", tmp_path / "b")
    assert b.pull(want=lambda s: s != 4) == [6]
    assert complete_steps(b.local / "checkpoints") == [6]
    for rel in ("checkpoints/6/state/d/arrays", "checkpoints/6/" + SEAL, "config.yaml", "metrics.jsonl"):
        assert (b.local / rel).read_bytes() == (a.local / rel).read_bytes(), rel

    # a changed file is pulled again; the watcher's own evals/ is not overwritten once it has one
    (a.local / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2}\n')
    (a.local / "evals").mkdir()
    (a.local / "evals" / "evals.jsonl").write_text("bucket's\n")
    a.push(keep=2)
    (b.local / "evals").mkdir()
    (b.local / "evals" / "evals.jsonl").write_text("mine\n")
    b.pull(keep_local=("evals",))
    assert (b.local / "metrics.jsonl").read_text().count("step") == 2
    assert (b.local / "evals" / "evals.jsonl").read_text() == "mine\n"
    b.push_files("evals")
    fs, root = fsspec.core.url_to_fs(url)
    assert fs.cat_file(f"{root}/evals/evals.jsonl") == b"mine\n"

    # the bucket's retention removed a step: the mirror drops its copy on the next pull
    for s in (8, 10):
        make_step(a.local, s)
        a.push(keep=2)
    assert a.complete_remote_steps() == [10, 8]
    b.pull()
    assert complete_steps(b.local / "checkpoints") == [10, 8]


def test_a_push_cut_short_is_not_complete_and_the_next_push_finishes_it(url, tmp_path):
    a = RunMirror(url, "train", tmp_path / "a")
    folder = make_step(a.local, 3)
    fs, root = fsspec.core.url_to_fs(url)
    # what a killed upload leaves: some files, no seal
    fs.put_file(str(folder / "state" / "d" / "arrays"), f"{root}/checkpoints/3/state/d/arrays")
    assert a.complete_remote_steps() == []
    # a seal whose files are not all there (or not at their size) is not complete either
    fs.put_file(str(folder / SEAL), f"{root}/checkpoints/3/{SEAL}")
    fs.pipe_file(f"{root}/checkpoints/3/meta/metadata", b"cut")
    assert a.complete_remote_steps() == []
    b = RunMirror(url, "watch", tmp_path / "b")
    assert b.pull() == [] and complete_steps(b.local / "checkpoints") == []
    fs.rm(f"{root}/checkpoints/3/{SEAL}")
    assert a.push() == [3]
    assert a.complete_remote_steps() == [3]
    assert b.pull() == [3]
    assert (b.local / "checkpoints/3/meta/metadata").read_bytes() == (folder / "meta/metadata").read_bytes()


def test_a_step_not_sealed_locally_is_not_pushed(url, tmp_path):
    a = RunMirror(url, "train", tmp_path / "a")
    folder = make_step(a.local, 5)
    (folder / SEAL).unlink()  # an asynchronous save not finished yet: sealed at the next save or at close
    assert a.push() == [] and a.complete_remote_steps() == []
    seal(folder)
    (folder / "state" / "d" / "arrays").write_bytes(b"torn")  # differs from its seal: never uploaded
    assert a.push() == []


def test_staging_folders_and_urls(tmp_path, monkeypatch):
    monkeypatch.setenv("OLMAX_RUN_STAGING", str(tmp_path))
    assert staging_folder("s3://b/run", "train") != staging_folder("s3://b/run", "watch")
    assert staging_folder("s3://b/run", "train") != staging_folder("s3://b/run2", "train")
    assert staging_folder("s3://b/run", "train").parent == tmp_path / "train"
    assert is_remote_run("s3://b/run") and is_remote_run("memory://x")
    assert not is_remote_run(str(tmp_path)) and not is_remote_run(f"file://{tmp_path}")


def test_a_mirror_of_another_run_is_refused(url, tmp_path):
    RunMirror(url, "train", tmp_path / "a")._write_state()
    with pytest.raises(OlmaxError, match="the local mirror of another run"):
        RunMirror(url + "-other", "train", tmp_path / "a")


def test_a_store_that_keeps_other_bytes_leaves_the_step_unsealed_with_one_error(url, tmp_path, monkeypatch):
    """A file the store keeps short (as an emulator once kept a file whose last byte was a CR) would leave a
    step no reader takes: the push stops before the seal, naming the object and both sizes; the next push,
    once the store keeps what it is sent, seals the step."""
    a = RunMirror(url, "train", tmp_path / "a")
    make_step(a.local, 2, payload=b"arrays ending in a carriage return\r")
    real = a.fs.put_file

    def short(lpath, rpath, **kw):
        real(lpath, rpath, **kw)
        if rpath.endswith("arrays"):
            a.fs.pipe_file(rpath, Path(lpath).read_bytes()[:-1])

    monkeypatch.setattr(a.fs, "put_file", short)
    with pytest.raises(OlmaxError, match=r"checkpoints/2/state/d/arrays: the store holds 34 bytes where 35"):
        a.push(keep=2)
    assert not any(o.endswith(SEAL) for o in objects(url)) and a.complete_remote_steps() == []
    monkeypatch.setattr(a.fs, "put_file", real)
    assert a.push(keep=2) == [2] and a.complete_remote_steps() == [2]


def host_part(run: Path, step: int, files: dict[str, bytes]) -> Path:
    """One host's part of a step as its checkpointer leaves it in its own mirror (no seal of its own)."""
    folder = run / "checkpoints" / str(step)
    for name, body in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(body)
    return folder


def test_parts_of_hosts_are_one_step_only_once_sealed_and_a_fresh_host_gets_the_whole_step(url, tmp_path):
    shared = {COMMIT_MARKER: b"ok", "state/_METADATA": b"{}", "state/params.w/.zarray": b"{}"}
    parts = [
        {
            **shared,
            "state/params.w/0.0": b"a" * 10,
            "state/opt.mu.w/0.0": b"m" * 10,
            "data/loader_state.json": b"{}",
        },
        {**shared, "state/params.w/1.0": b"b" * 10, "state/opt.mu.w/1.0": b"n" * 10},
    ]
    hosts = [RunMirror(url, "train", tmp_path / f"host{i}") for i in range(2)]
    union = {}
    for mirror, files in zip(hosts, parts, strict=True):
        folder = host_part(mirror.local, 4, files)
        mine = [n for n in files if n not in union]
        union.update({n: len(b) for n, b in files.items() if n not in union})
        mirror.upload_step_files(4, folder, mine)
        assert hosts[0].complete_remote_steps() == []  # uploaded, not sealed: never complete
    hosts[0].seal_step(4, union, keep=2)
    assert hosts[0].complete_remote_steps() == [4]

    fresh = RunMirror(url, "train", tmp_path / "fresh")
    assert fresh.resume_step(exact=True) == 4
    got = fresh.local / "checkpoints" / "4"
    assert sorted(str(p.relative_to(got)) for p in got.rglob("*") if p.is_file()) == sorted([*union, SEAL])

    # host 1 kept its own part of step 4 and a newer part of step 6 that was never sealed: a rerun there
    # holds the whole step 4 and nothing of step 6
    host_part(hosts[1].local, 6, parts[1])
    assert hosts[1].resume_step(exact=True) == 4
    assert complete_steps(hosts[1].local / "checkpoints") == [4]
    assert not (hosts[1].local / "checkpoints" / "6").exists()
    assert (hosts[1].local / "checkpoints" / "4" / "state" / "params.w" / "0.0").read_bytes() == b"a" * 10

    # a reader's copy holds the parameters and no optimizer state, sealed with what it holds
    reader = RunMirror(url, "watch", tmp_path / "reader", reads="params")
    assert reader.pull(want=lambda s: s == 4) == [4]
    held = reader.local / "checkpoints" / "4"
    assert not list(held.glob("state/opt.*")) and (held / "state" / "params.w" / "1.0").is_file()
    assert complete_steps(reader.local / "checkpoints") == [4]
    assert reader.last_download["left_bytes"] == 20


def test_a_reader_of_an_ocdbt_step_downloads_it_whole(url, tmp_path):
    a = RunMirror(url, "train", tmp_path / "a")
    folder = make_step(a.local, 2)
    (folder / "state" / "manifest.ocdbt").write_bytes(b"index")
    seal(folder)
    a.push()
    reader = RunMirror(url, "eval", tmp_path / "r", reads="params")
    reader.pull()
    assert (reader.local / "checkpoints" / "2" / "state" / "d" / "arrays").is_file()
    assert reader.last_download["left_bytes"] == 0
