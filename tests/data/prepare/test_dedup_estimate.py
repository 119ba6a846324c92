"""`data prepare --dedup ... --dry-run`: the estimate's rates are the record's, it writes nothing, it
refuses a run over --max-memory before writing anything, and on a moderate input of other text than the
rates were measured on (without exact copies) it is within 1.5x of the measured peak memory and
decision-pass CPU."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest

from olmax.cli import main
from olmax.data.prepare.dedup_stages_estimate import RATES, RECORD
from olmax.testing.prepare_testdata import write_jsonl

ROOT = Path(__file__).resolve().parents[3]
DOC = Path("/usr/share/doc")
NAMES = {
    "base_rss": "base_rss_bytes",
    "plain_rss": "plain_rss_bytes",
    "rss_minhash": "rss_minhash_per_byte",
    "rss_substring": "rss_substring_per_byte",
    "cpu_fixed": "cpu_fixed_s",
    "cpu_read": "cpu_read_s_per_byte",
    "cpu_minhash": "cpu_minhash_s_per_byte",
    "cpu_substring": "cpu_substring_s_per_byte",
    "shard_cpu": "shard_cpu_s_per_byte",
    "shard_disk": "shard_disk_per_byte",
    "decisions_disk": "decisions_disk_per_byte",
}


def test_the_rates_are_the_records():
    figures = json.loads((ROOT / RECORD).read_text())["figures"]
    assert {f.name for f in fields(RATES)} == set(NAMES)
    for field, figure in NAMES.items():
        assert getattr(RATES, field) == pytest.approx(figures[figure]["median"], rel=1e-3), field


def dry(tmp_path: Path, *extra: str) -> int:
    argv = ["data", "prepare", "--tokenizer", "dolma2", "--out", str(tmp_path / "out")]
    return main([*argv, "--dedup", "exact,minhash,substring", *extra, f"t={tmp_path}/raw"])


def test_dry_run_prints_the_stages_and_writes_nothing(tmp_path, capsys):
    write_jsonl(tmp_path / "raw" / "a.jsonl", [(f"d{i}", "word " * 2000) for i in range(100)])
    size = (tmp_path / "raw" / "a.jsonl").stat().st_size
    assert dry(tmp_path, "--dry-run", "--substring-partition-bytes", str(size // 3)) == 0
    out = capsys.readouterr().out
    assert f"{size / 1e6:,.1f} MB (rates: {RECORD})" in out
    for stage in ("read + exact", "minhash", "substring", "shards (tokenize, write)", "peak / total"):
        assert f"  {stage} " in out
    assert "substring partitions: 4 of about" in out  # ceil(3 + a remainder)
    assert not (tmp_path / "out").exists()
    # over --max-memory: the dry run says so (exit 1); a real run is refused before anything is written
    assert dry(tmp_path, "--dry-run", "--max-memory", "1MiB") == 1
    assert "--max-memory 1 MB: REFUSED" in capsys.readouterr().out
    assert dry(tmp_path, "--max-memory", "1MiB") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("olmax: error:") and "exceeds --max-memory 1 MB" in err[0]
    assert not (tmp_path / "out").exists()


# VmHWM is this address space's peak; ru_maxrss would carry over the forking pytest process's size
CHILD = """
import json, sys
from olmax.cli import main
rc = main(sys.argv[1:])
hwm = next(ln for ln in open("/proc/self/status") if ln.startswith("VmHWM:"))
print(json.dumps({"rc": rc, "rss": int(hwm.split()[1]) * 1024}))
"""


@pytest.mark.may_skip
@pytest.mark.skipif(len(list(DOC.glob("*/copyright"))) < 300, reason="needs a machine's /usr/share/doc")
def test_the_estimate_is_within_1_5x_of_a_measured_run(tmp_path, capsys):
    # distinct texts only: the estimate assumes the substring stage sees every document (an upper bound
    # when exact copies go first; most packages' copyright files are shared copies)
    docs: dict[str, str] = {}
    for p in sorted(DOC.glob("*/copyright")):
        text = p.read_text(encoding="utf-8", errors="replace")
        if text.strip() and text not in docs:
            docs[text] = p.parent.name
    write_jsonl(tmp_path / "raw" / "lic.jsonl", [(i, t) for t, i in docs.items()])
    assert dry(tmp_path, "--dry-run") == 0
    out = capsys.readouterr().out
    rows = {
        m[0].strip(): [float(x.replace(",", "")) for x in m[1:]]
        for m in re.findall(r"^  (.{26}) +([\d,.]+) +([\d,.]+) +([\d,.]+) +([\d,.]+)$", out, re.M)
    }
    memory = rows["peak / total"][0] * 1e6
    decisions_cpu = sum(
        v[2] for k, v in rows.items() if k not in ("peak / total", "shards (tokenize, write)")
    )
    argv = ["data", "prepare", "--no-progress", "--tokenizer", "dolma2", "--out", str(tmp_path / "out")]
    argv += ["--dedup", "exact,minhash,substring", f"t={tmp_path}/raw"]
    # a first run on a small input compiles the kernels into numba's on-disk cache, as any earlier run would
    write_jsonl(tmp_path / "warm" / "w.jsonl", [(f"w{i}", "a few words " * (50 + i)) for i in range(20)])
    warm = ["data", "prepare", "--no-progress", "--tokenizer", "dolma2", "--out", str(tmp_path / "warm-out")]
    warm += ["--dedup", "exact,minhash,substring", f"w={tmp_path}/warm"]
    subprocess.run([sys.executable, "-c", CHILD, *warm], capture_output=True, text=True, cwd=ROOT, check=True)
    proc = subprocess.run([sys.executable, "-c", CHILD, *argv], capture_output=True, text=True, cwd=ROOT)
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["rc"] == 0, proc.stderr
    cpu = float(re.search(r"dedup decisions for .* \(([0-9.]+)s CPU\)", proc.stderr).group(1))
    assert 1 / 1.5 <= memory / got["rss"] <= 1.5, (memory, got["rss"])
    assert 1 / 1.5 <= decisions_cpu / cpu <= 1.5, (decisions_cpu, cpu)
