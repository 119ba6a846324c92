"""s3:// and gs:// through the CLI against real protocol servers on loopback (moto's S3 server, a GCS JSON API
emulator; tests/object_stores.py): prepare from a bucket into a bucket writes the local run's bytes, the
audits of a bucket mix give the local verdicts, an HF export goes to a bucket, and each failure (a missing
bucket, no credentials, access denied, a half-written output, a rerun into a finished one) is one
`olmax: error:` line naming the URL, with nothing written."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from olmax.testing.prepare_testdata import pydoc_texts, stdlib_texts, write_jsonl

pytestmark = pytest.mark.slow  # two protocol servers and ~10 CLI runs per store: about a minute

PREPARE = ["data", "prepare", "--no-progress", "--tokenizer", "dolma2", "--shard-size", "60000"]
STREAM = ["--seq-len", "256", "--global-batch-size", "8"]
NO_GCS_AUTH = (
    "the GCS emulator accepts every request and gcsfs falls back to anonymous access when it finds no "
    "credentials, so there is no credential or permission failure to provoke on gs://"
)


def olmax(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "olmax.cli", *args],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )


def error_line(proc: subprocess.CompletedProcess, url: str) -> str:
    """The one `olmax: error:` line of a failed command, which names `url`; no traceback."""
    assert proc.returncode != 0, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [x for x in proc.stderr.splitlines() if x.startswith("olmax: error:")]
    assert len(lines) == 1, proc.stderr
    assert url in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def raw(tmp_path_factory) -> Path:
    """About 280 KB of real code and prose in three files (gzip and plain) and an eval set whose items are
    copied from the prose (and items that are not)."""
    d = tmp_path_factory.mktemp("raw")
    code = [(i, t[:6000]) for i, t in stdlib_texts(40)]
    write_jsonl(d / "code" / "a.jsonl.gz", code[:20])
    write_jsonl(d / "code" / "b.jsonl", code[20:])
    prose = [(i, t[:4000]) for i, t in pydoc_texts()[:60]]
    write_jsonl(d / "prose" / "p.jsonl", prose)
    long = [t.split() for _, t in prose if len(t.split()) >= 80]
    outside = [t.split() for _, t in pydoc_texts()[60:] if len(t.split()) >= 45]
    items = [{"id": f"copied-{j}", "text": " ".join(long[3 * j][20:60])} for j in range(4)]
    items += [{"id": f"clean-{j}", "text": " ".join(outside[j][:40])} for j in range(4)]
    (d / "evals").mkdir()
    (d / "evals" / "items.jsonl").write_text("".join(json.dumps(it) + "\n" for it in items))
    return d


def prepare_args(out: str, inputs: str) -> list[str]:
    return [*PREPARE, "--out", out, f"code={inputs}/code", f"prose={inputs}/prose/*.jsonl"]


@pytest.fixture(scope="module")
def local(raw, tmp_path_factory) -> dict:
    """The same prepare and audits on local files: the reference."""
    d = tmp_path_factory.mktemp("local")
    out = d / "shards"
    proc = olmax(*prepare_args(str(out), str(raw)))
    assert proc.returncode == 0, proc.stderr
    return {"out": out, "reports": audit_all(str(out / "mix.txt"), str(raw / "evals" / "items.jsonl"), d)}


def audit_all(mix: str, evals: str, report_dir: str | os.PathLike) -> dict[str, dict]:
    """`audit loader` (the plan: its content pass reads local files only), `audit leaks` and `audit dedup`
    of `mix`, reports written under `report_dir` (a folder or a bucket URL); each report and exit code."""
    runs = {
        "loader": ["audit", "loader", "--no-content", "--mix", mix, *STREAM],
        "leaks": ["audit", "leaks", "--mix", mix, "--eval", f"items={evals}"],
        "dedup": ["audit", "dedup", "--mix", mix],
    }
    out = {}
    for name, args in runs.items():
        report = f"{report_dir}/{name}.json"
        proc = olmax(*args, "--out", report)
        assert proc.returncode in (0, 1, 3) and "olmax: error" not in proc.stderr, proc.stderr
        out[name] = {"rc": proc.returncode, "report": report}
    return out


def read_report(path: str, fs) -> dict:
    if "://" in path:
        fs.invalidate_cache()
        return json.loads(fs.cat_file(path.split("://", 1)[1]))
    return json.loads(Path(path).read_text())


def versions(bucket, prefix: str) -> dict[str, str]:
    """Each object's store version (GCS generation, S3 last-modified and etag) under `prefix`."""
    bucket.fs.invalidate_cache()
    root = prefix.split("://", 1)[1]
    out = {}
    for p in bucket.fs.find(root):
        info = bucket.fs.info(p)
        out[p] = str(info.get("generation") or (info.get("LastModified"), info.get("ETag")))
    return out


def test_an_objects_bytes_come_back_exactly_whatever_they_end_with(store, tmp_path):
    """Small files go up as multipart uploads; each server keeps their bytes as sent (tests/object_stores.py
    makes the GCS emulator do so: its parser dropped a last CR)."""
    for name, data in {"cr": b"x\r", "lf-cr": b"x\n\r", "crlf": b"x\r\n", "bytes": bytes(range(256))}.items():
        (tmp_path / name).write_bytes(data)
        key = f"{store.url.split('://', 1)[1]}/{name}"
        store.fs.put_file(str(tmp_path / name), key)
        store.fs.invalidate_cache()
        assert (store.fs.info(key)["size"], store.fs.cat_file(key)) == (len(data), data), name


def test_prepare_from_a_bucket_into_a_bucket_writes_the_local_bytes(store, raw, local):
    store.server.put_tree(raw, store.join("raw"))
    out = store.join("shards")
    proc = olmax(*prepare_args(out, store.join("raw")))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"{out}/mix.txt"
    got = store.server.read_tree(out)
    want = {str(p.relative_to(local["out"])): p.read_bytes() for p in local["out"].rglob("*") if p.is_file()}
    assert got.keys() == want.keys() and sum(k.endswith(".npy") for k in got) >= 4

    def same(name: str) -> str:  # the inputs' names are the only difference
        return name.replace(str(raw), store.join("raw"))

    for k in want:
        a, b = want[k], got[k]
        if k.endswith(".npy") or k == "mix.txt":
            assert a == b, k
        elif k.endswith(".csv.gz"):
            assert same(gzip.decompress(a).decode()) == gzip.decompress(b).decode(), k
        elif k == "manifest.json":  # its settings hash covers the inputs' versions: mtimes here, etags there
            a, b = json.loads(same(a.decode())), json.loads(b)
            assert a.pop("settings_sha256") != b.pop("settings_sha256") and a == b
        else:  # the journal: [input, size, version]
            a, b = json.loads(same(a.decode())), json.loads(b)
            for s in a["settings"]["sources"] + b["settings"]["sources"]:
                s["inputs"] = [i[:2] for i in s["inputs"]]
            assert a == b, k

    # the same command again: nothing to do, nothing rewritten
    before = versions(store, out)
    time.sleep(1.1)  # S3's last-modified has one-second resolution
    again = olmax(*prepare_args(out, store.join("raw")))
    assert again.returncode == 0, again.stderr
    assert "nothing to do" in again.stderr and again.stdout.strip() == f"{out}/mix.txt"
    assert versions(store, out) == before


def test_audits_of_a_bucket_mix_give_the_local_verdicts(store, raw, local, tmp_path):
    store.server.put_tree(local["out"], store.join("shards"))
    store.server.put_tree(raw / "evals", store.join("evals"))
    remote = audit_all(
        store.join("shards", "mix.txt"), store.join("evals", "items.jsonl"), store.join("reports")
    )
    reports = {}
    for name, ref in local["reports"].items():
        want = read_report(ref["report"], store.fs)
        got = reports[name] = read_report(remote[name]["report"], store.fs)
        assert remote[name]["rc"] == ref["rc"], name
        assert (got["verdict"], got["ok"]) == (want["verdict"], want["ok"]), name
        if name == "leaks":  # the same items found, in the same documents but for the files' names
            assert [(c["eval"], c["id"], c["kind"]) for c in got["contaminated"]] == [
                (c["eval"], c["id"], c["kind"]) for c in want["contaminated"]
            ]
        else:
            assert got["checks"] == want["checks"], name
    got = reports["leaks"]
    found = {c["id"] for c in got["contaminated"]}
    assert {f"copied-{j}" for j in range(4)} <= found and not any(i.startswith("clean-") for i in found)
    assert got["verdict"] == "fail"


def test_hf_export_to_a_bucket(store, tmp_path):
    """`model convert --to hf` into a bucket: the local folder's bytes, config.json uploaded last; a
    non-empty destination is refused before any work."""
    pytest.importorskip("transformers")
    from olmax.model.hf_reference import save_random_checkpoint

    src = save_random_checkpoint(tmp_path / "src", seed=1, dtype="float32", num_hidden_layers=2)
    assert olmax("model", "convert", "--to", "hf", str(src), str(tmp_path / "local")).returncode == 0
    url = store.join("export")
    proc = olmax("model", "convert", "--to", "hf", str(src), url)
    assert proc.returncode == 0, proc.stderr
    want = {str(p.relative_to(tmp_path / "local")): p.read_bytes() for p in (tmp_path / "local").rglob("*")}
    assert store.server.read_tree(url) == want and "config.json" in want
    before = versions(store, url)
    again = olmax("model", "convert", "--to", "hf", str(src), url)
    assert "not empty" in error_line(again, url)
    assert versions(store, url) == before


def test_a_missing_bucket_is_one_line(store, raw, tmp_path):
    missing = store.server.unused_bucket()
    store.server.put_tree(raw, store.join("raw"))
    line = error_line(olmax(*prepare_args(f"{missing}/shards", store.join("raw"))), missing)
    assert "bucket does not exist" in line
    line = error_line(olmax(*prepare_args(str(tmp_path / "out"), f"{missing}/raw")), missing)
    assert "bucket does not exist" in line and not (tmp_path / "out").exists()
    line = error_line(
        olmax("audit", "loader", "--mix", f"{missing}/mix.txt", *STREAM, "--out", "r.json"), missing
    )
    assert "bucket does not exist" in line
    report = f"{missing}/reports/leaks.json"
    line = error_line(
        olmax("audit", "leaks", "--mix", store.join("nope.txt"), "--eval", "arc_easy", "--out", report),
        missing,
    )
    assert "bucket does not exist" in line
    store.fs.invalidate_cache()
    assert not store.fs.exists(missing.split("://", 1)[1])


@pytest.mark.parametrize("store", ["s3", pytest.param("gs", marks=pytest.mark.may_skip)], indirect=True)
def test_no_credentials_is_one_line(store, raw, local, tmp_path):
    if store.scheme == "gs":
        pytest.skip(NO_GCS_AUTH)
    store.server.put_tree(raw, store.join("raw"))
    store.server.put_tree(local["out"], store.join("shards"))
    env = {k: v for k, v in os.environ.items() if k not in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    env = {k: v for k, v in env.items() if k not in ("AWS_PROFILE", "AWS_SESSION_TOKEN")}
    env |= {
        "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
        "AWS_CONFIG_FILE": "/nonexistent",
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    for args, url in (
        (prepare_args(str(tmp_path / "out"), store.join("raw")), store.join("raw")),
        (prepare_args(store.join("again"), str(raw)), store.join("again")),
        (
            ["audit", "loader", "--mix", store.join("shards", "mix.txt"), *STREAM, "--out", "r.json"],
            store.url,
        ),
    ):
        line = error_line(olmax(*args, env=env), url)
        assert "no credentials found" in line and "AWS_ACCESS_KEY_ID" in line, line
    assert not (tmp_path / "out").exists()
    store.fs.invalidate_cache()
    assert not store.fs.exists(store.join("again").split("://", 1)[1])


@pytest.mark.parametrize("store", ["s3", pytest.param("gs", marks=pytest.mark.may_skip)], indirect=True)
def test_access_denied_is_one_line(store, raw, local, tmp_path):
    """moto checks requests against IAM once its auth is on: a user without a policy is denied."""
    if store.scheme == "gs":
        pytest.skip(NO_GCS_AUTH)
    import boto3
    import requests

    store.server.put_tree(raw, store.join("raw"))
    store.server.put_tree(local["out"], store.join("shards"))
    iam = boto3.client(
        "iam",
        endpoint_url=store.server.endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
    )
    user = f"nobody-{store.url[-10:]}"
    iam.create_user(UserName=user)
    key = iam.create_access_key(UserName=user)["AccessKey"]
    env = os.environ | {
        "AWS_ACCESS_KEY_ID": key["AccessKeyId"],
        "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"],
    }
    requests.post(f"{store.server.endpoint}/moto-api/reset-auth", data=b"0", timeout=10)  # auth on
    try:
        for args, url in (
            (prepare_args(str(tmp_path / "out"), store.join("raw")), store.join("raw")),
            (
                ["audit", "loader", "--mix", store.join("shards", "mix.txt"), *STREAM, "--out", "r.json"],
                store.url,
            ),
        ):
            line = error_line(olmax(*args, env=env), url)
            assert "access denied" in line and "permissions" in line, line
        line = error_line(olmax(*prepare_args(store.join("out"), str(raw)), env=os.environ | {}), store.url)
        assert "rejected the credentials" in line or "access denied" in line, line  # "testing" is no IAM key
    finally:
        requests.post(f"{store.server.endpoint}/moto-api/reset-auth", data=b"inf", timeout=10)
    assert not (tmp_path / "out").exists()


def test_a_half_written_output_is_refused(store, raw, local):
    """Shards and the journal without manifest.json (uploaded last): neither read as a mix nor resumed
    over; with mix.txt and without it."""
    store.server.put_tree(raw, store.join("raw"))
    out = store.join("shards")
    store.server.put_tree(local["out"], out)
    store.fs.rm(f"{out.split('://', 1)[1]}/manifest.json")
    for drop_mix in (False, True):
        if drop_mix:
            store.fs.rm(f"{out.split('://', 1)[1]}/mix.txt")
        before = versions(store, out)
        line = error_line(
            olmax("audit", "loader", "--mix", f"{out}/mix.txt", *STREAM, "--out", "r.json"), out
        )
        assert "unfinished" in line, line
        line = error_line(olmax("audit", "dedup", "--mix", f"{out}/mix.txt", "--out", "d.json"), out)
        assert "unfinished" in line, line
        line = error_line(olmax(*prepare_args(out, store.join("raw"))), out)
        assert "unfinished" in line and "--overwrite" in line, line
        assert versions(store, out) == before
