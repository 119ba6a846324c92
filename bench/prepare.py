"""Benchmark `olmax data prepare` against AI2's `dolma tokens` on the same Dolma-format text.

What it does, in one run:
  1. builds (or reuses) a deterministic corpus of real text in Dolma format under bench/out/: Python
     source from the stdlib and from .venv's site-packages, and prose (pydoc topics, package READMEs
     and METADATA), shuffled with a fixed seed and split over a few `.jsonl.gz` files so each worker
     has files to take;
  2. runs `dolma tokens` (dolma==1.2.1 in its own venv, built by bench/setup_dolma.sh when missing)
     and `olmax data prepare` on it with the same tokenizer file and the same number of workers;
  3. reads both outputs only through their `.csv.gz` sidecars (`start,end,id,src,loc`, end exclusive;
     olmax's shards are found through its mix.txt) and compares the tokens of every document by id;
  4. prints wall and CPU seconds, tokens and tokens/s per tool, the agreement, and as its last line
     `prepare tokens/s olmax/dolma = N.Nx`.

Exits non-zero when any document differs or is missing on one side, or when a tool fails.
The corpus depends only on the files installed on this machine, so reruns reuse it.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import sysconfig
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "bench" / "out"
DOLMA_VENV = REPO / ".venv-dolma"

# dolma2 (OLMo 3's tokenizer): EOS ends every document, PAD is declared for dolma, there is no BOS.
EOS_ID = 100257
PAD_ID = 100277
DOLMA2_SHA256 = "3ca996cca8afea58b34e95c353e859333592642a5e51d695d7a6dbbaf692dfe9"

CORPUS_VERSION = 1  # bump when the corpus recipe changes, so inputs built by an older recipe are rebuilt
CORPUS_SEED = 20251130
N_INPUT_FILES = 8  # a few files per worker: both tools parallelize over input files
MAX_DOC_BYTES = 1_000_000  # web-document sized; skips a handful of generated multi-MB modules
PROSE_SUFFIXES = (".md", ".rst", ".txt")

Decode = Callable[[np.ndarray], str]  # token ids -> text, special tokens spelled out


# ---------------------------------------------------------------------------------------------- corpus
@dataclass(frozen=True)
class Corpus:
    """A built input: its folder, the glob both tools read, and what it holds."""

    root: Path
    text_bytes: int
    gz_bytes: int
    docs: int
    per_source: dict[str, int]

    @property
    def glob(self) -> str:
        return str(self.root / "*.jsonl.gz")


def _candidates() -> list[tuple[str, str, Path]]:
    """(source, doc id, path) for every file the corpus may draw from, in a machine-independent order."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    site = sorted((REPO / ".venv" / "lib").glob("python3*/site-packages"))
    found: list[tuple[str, str, Path]] = []
    for p in stdlib.rglob("*.py"):
        rel = p.relative_to(stdlib)
        if "site-packages" not in rel.parts and "__pycache__" not in rel.parts:
            found.append(("stdlib", f"stdlib/{rel.as_posix()}", p))
    for root in site:
        for p in root.rglob("*"):
            if "__pycache__" in p.parts or not p.is_file():
                continue
            rel = p.relative_to(root).as_posix()
            if p.suffix == ".py":
                found.append(("code", f"site/{rel}", p))
            elif p.suffix in PROSE_SUFFIXES or p.name == "METADATA":
                found.append(("prose", f"site/{rel}", p))
    found.sort(key=lambda c: c[1])
    random.Random(CORPUS_SEED).shuffle(found)
    return found


def _documents(target_bytes: int) -> Iterator[dict[str, str]]:
    """Dolma documents (`id`, `text`, `source`) until `target_bytes` of UTF-8 text have been produced."""
    import pydoc_data.topics

    produced = 0
    # pydoc's topic texts first: a fixed, small block of English prose.
    for name in sorted(pydoc_data.topics.topics):
        text = pydoc_data.topics.topics[name]
        produced += len(text.encode())
        yield {"id": f"pydoc/{name}", "text": text, "source": "prose"}
    for source, doc_id, path in _candidates():
        if produced >= target_bytes:
            return
        raw = path.read_bytes()
        if len(raw) > MAX_DOC_BYTES:
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            continue  # a few stdlib test files are latin-1 on purpose; Dolma text is UTF-8
        if not text.strip():
            continue  # empty __init__.py files: neither tool emits anything for them
        produced += len(raw)
        yield {"id": doc_id, "text": text, "source": source}


def build_corpus(input_mb: float) -> Corpus:
    """Write (or reuse) the Dolma-format corpus of at least `input_mb` MB (10^6 bytes) of text."""
    root = OUT / f"input-{input_mb:g}mb"
    stamp = root / "corpus.json"
    if stamp.exists():
        meta = json.loads(stamp.read_text())
        if meta.get("version") == CORPUS_VERSION and all((root / f).exists() for f in meta["files"]):
            return Corpus(root, meta["text_bytes"], meta["gz_bytes"], meta["docs"], meta["per_source"])
    print(f"building corpus {root} ({input_mb:g} MB of text) ...", flush=True)
    tmp = root.with_name(root.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    names = [f"part-{i:02d}.jsonl.gz" for i in range(N_INPUT_FILES)]
    raw_files = [open(tmp / n, "wb") for n in names]  # noqa: SIM115 (closed below)
    # mtime=0 and no file name in the gzip header: the same text gives the same bytes.
    outs = [gzip.GzipFile(filename="", mode="wb", fileobj=f, mtime=0) for f in raw_files]
    text_bytes = docs = 0
    per_source: dict[str, int] = {}
    for i, doc in enumerate(_documents(int(input_mb * 1e6))):
        line = json.dumps(doc, ensure_ascii=False) + "\n"
        outs[i % N_INPUT_FILES].write(line.encode())
        text_bytes += len(doc["text"].encode())
        docs += 1
        per_source[doc["source"]] = per_source.get(doc["source"], 0) + 1
    for g, f in zip(outs, raw_files):
        g.close()
        f.close()
    gz_bytes = sum((tmp / n).stat().st_size for n in names)
    meta = {
        "version": CORPUS_VERSION,
        "input_mb": input_mb,
        "files": names,
        "text_bytes": text_bytes,
        "gz_bytes": gz_bytes,
        "docs": docs,
        "per_source": per_source,
    }
    (tmp / "corpus.json").write_text(json.dumps(meta, indent=1) + "\n")
    shutil.rmtree(root, ignore_errors=True)
    tmp.rename(root)
    return Corpus(root, text_bytes, gz_bytes, docs, per_source)


# ------------------------------------------------------------------------------------------- the tools
@dataclass
class Timing:
    """Wall seconds, and CPU seconds of the whole process tree."""

    wall_s: float
    cpu_s: float


class _TreeCpu:
    """CPU seconds of a process and all its descendants, sampled from /proc while they run.

    getrusage(RUSAGE_CHILDREN) misses dolma's multiprocessing workers, so the tree is sampled instead:
    every process's own utime+stime, last value seen (a process that lives under one period is missed).
    """

    def __init__(self, root: int, period_s: float = 0.2):
        self.root, self.period_s = root, period_s
        self.ticks: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        parent: dict[int, int] = {}
        used: dict[int, int] = {}
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
            except OSError:
                continue  # it ended while we looked
            pid = int(entry.name)
            parent[pid] = int(fields[1])  # fields after "comm)": state, ppid, ..., utime (12), stime (13)
            used[pid] = int(fields[11]) + int(fields[12])
        tree, frontier = {self.root}, [self.root]
        children: dict[int, list[int]] = {}
        for pid, ppid in parent.items():
            children.setdefault(ppid, []).append(pid)
        while frontier:
            for child in children.get(frontier.pop(), []):
                if child not in tree:
                    tree.add(child)
                    frontier.append(child)
        for pid in tree & used.keys():
            self.ticks[pid] = max(self.ticks.get(pid, 0), used[pid])

    def _loop(self) -> None:
        while not self._stop.wait(self.period_s):
            self._sample()

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return sum(self.ticks.values()) / os.sysconf("SC_CLK_TCK")


def _run_timed(name: str, cmd: list[str], log: Path) -> Timing:
    """Run `cmd` with its output sent to `log`: wall seconds and its process tree's CPU seconds."""
    print(f"running {name}: {' '.join(cmd)}", flush=True)
    t0 = time.perf_counter()
    with open(log, "wb") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT)
        cpu = _TreeCpu(proc.pid)
        rc = proc.wait()
    wall = time.perf_counter() - t0
    cpu_s = cpu.stop()
    if rc != 0:
        tail = log.read_text(errors="replace")[-4000:]
        sys.exit(f"{name} failed with exit code {rc}; last lines of {log}:\n{tail}")
    return Timing(wall, cpu_s)


def ensure_dolma() -> Path:
    """Path of the `dolma` command, building its venv with bench/setup_dolma.sh when it is missing."""
    dolma = DOLMA_VENV / "bin" / "dolma"
    if not dolma.exists():
        subprocess.run(["bash", str(REPO / "bench" / "setup_dolma.sh"), str(DOLMA_VENV)], check=True)
    return dolma


def run_dolma(corpus: Corpus, tokenizer: Path, dst: Path, workers: int) -> Timing:
    """`dolma tokens` as OLMo 3's data was made: uint32, each document + EOS 100257, no BOS."""
    dolma = ensure_dolma()
    shutil.rmtree(dst, ignore_errors=True)
    dst.mkdir(parents=True)
    cmd = [
        str(dolma),
        "tokens",
        "--documents",
        corpus.glob,
        "--destination",
        str(dst),
        "--tokenizer.name_or_path",
        str(tokenizer),
        "--tokenizer.eos_token_id",
        str(EOS_ID),
        "--tokenizer.pad_token_id",
        str(PAD_ID),
        "--processes",
        str(workers),
        "--dtype",
        "uint32",
        "--seed",
        "0",
    ]
    # dolma imports nltk, which tries to download `punkt` at import; offline it only logs and goes on.
    return _run_timed("dolma tokens", cmd, dst.parent / "dolma.log")


def run_olmax(corpus: Corpus, tokenizer: str, dst: Path, workers: int, beam: str | None = None) -> Timing:
    """`olmax data prepare` into a fresh folder, one label for the whole corpus (`beam`: with --runner beam
    and these pipeline options)."""
    exe = Path(sys.executable).parent / "olmax"
    olmax = str(exe) if exe.exists() else shutil.which("olmax")
    if olmax is None:
        sys.exit("no `olmax` command next to this Python or on PATH: run `make setup` first")
    shutil.rmtree(dst, ignore_errors=True)
    # --dolma-compat: tokenize text.strip() and skip a second EOS, exactly as `dolma tokens` 1.2.1 does
    cmd = [
        olmax,
        "data",
        "prepare",
        "--tokenizer",
        tokenizer,
        "--out",
        str(dst),
        "--dolma-compat",
        "--workers",
        str(workers),
        "--overwrite",
        f"bench={corpus.glob}",
    ]
    if beam is not None:
        cmd += ["--runner", "beam", f"--pipeline-options={beam}"]
        return _run_timed("olmax data prepare --runner beam", cmd, dst.parent / "olmax-beam.log")
    return _run_timed("olmax data prepare", cmd, dst.parent / "olmax.log")


def same_bytes(a: Path, b: Path) -> list[str]:
    """Relative paths whose bytes differ between two prepare outputs (or exist in one only): every file,
    the manifest (prepare writes no timing into it) and the resume journal included."""

    def files(root: Path) -> dict[str, Path]:
        return {str(p.relative_to(root)): p for p in root.rglob("*") if p.is_file()}

    fa, fb = files(a), files(b)
    return sorted(set(fa) ^ set(fb)) + sorted(
        k for k in set(fa) & set(fb) if fa[k].read_bytes() != fb[k].read_bytes()
    )


# --------------------------------------------------------------------------------- reading the outputs
@dataclass
class Side:
    """One tool's output: every document's token span, located through the sidecars."""

    name: str
    shards: list[np.ndarray] = field(default_factory=list)
    where: dict[str, tuple[int, int, int]] = field(default_factory=dict)  # id -> (shard, start, end)
    duplicates: int = 0
    tokens: int = 0
    problems: list[str] = field(default_factory=list)

    def doc(self, doc_id: str) -> np.ndarray:
        shard, start, end = self.where[doc_id]
        return self.shards[shard][start:end]


def _sidecar_rows(path: Path) -> Iterator[tuple[int, int, str]]:
    with gzip.open(path, "rt", encoding="utf-8", newline="") as f:
        for row in csv.reader(f):
            if not row:
                continue
            if not row[0].isdigit():  # a header line, should a writer add one
                continue
            yield int(row[0]), int(row[1]), row[2]


def read_side(name: str, shard_paths: list[Path]) -> Side:
    """Load each raw uint32 shard (np.memmap) and its `X.csv.gz` sidecar into one id -> span index."""
    side = Side(name)
    for path in shard_paths:
        sidecar = path.with_name(path.name.removesuffix(".npy") + ".csv.gz")
        if not sidecar.exists():
            side.problems.append(f"{path}: no sidecar {sidecar.name}")
            continue
        size = path.stat().st_size
        if size % 4:
            side.problems.append(f"{path}: {size} bytes is not a whole number of uint32 tokens")
        tokens = np.memmap(path, dtype="<u4", mode="r") if size else np.zeros(0, dtype="<u4")
        index = len(side.shards)
        side.shards.append(tokens)
        covered = 0
        for start, end, doc_id in _sidecar_rows(sidecar):
            if not 0 <= start < end <= len(tokens):
                side.problems.append(
                    f"{sidecar}: span {start},{end} of {doc_id!r} outside {len(tokens)} tokens"
                )
                continue
            if tokens[end - 1] != EOS_ID:
                side.problems.append(f"{sidecar}: {doc_id!r} does not end with EOS {EOS_ID}")
            if doc_id in side.where:
                side.duplicates += 1
            side.where[doc_id] = (index, start, end)
            side.tokens += end - start
            covered += end - start
        if covered != len(tokens):
            side.problems.append(f"{path}: sidecar rows cover {covered} of {len(tokens)} tokens")
    return side


def dolma_shards(dst: Path) -> list[Path]:
    """dolma names its outputs part-<writer>-<n>.npy; take every sidecar's shard rather than trust that."""
    return sorted(p.with_name(p.name.removesuffix(".csv.gz") + ".npy") for p in dst.rglob("*.csv.gz"))


def olmax_shards(dst: Path) -> list[Path]:
    """Shards named by OUT/mix.txt: `label,path` lines relative to OUT, `#` comments.

    Paths may hold OLMo-core's `{TOKENIZER}` placeholder; its value is the tokenizer id in OUT/manifest.json
    (or a `{TOKENIZER} = X` comment). A path listed twice is a planned repeat: its documents are read once.
    """
    mix = dst / "mix.txt"
    if not mix.exists():
        sys.exit(f"olmax wrote no {mix}")
    lines = mix.read_text().splitlines()
    tokenizer_id = None
    manifest = dst / "manifest.json"
    if manifest.exists():
        tokenizer_id = json.loads(manifest.read_text()).get("tokenizer", {}).get("id")
    for line in lines:
        if tokenizer_id is None and line.startswith("#") and "{TOKENIZER} =" in line:
            tokenizer_id = line.split("{TOKENIZER} =", 1)[1].split()[0]
    paths: list[Path] = []
    for line in lines:
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        rel = line.split(",", 1)[1].strip()
        if "{TOKENIZER}" in rel:
            if tokenizer_id is None:
                sys.exit(f"{mix}: {rel} holds {{TOKENIZER}} but neither manifest.json nor mix.txt names it")
            rel = rel.replace("{TOKENIZER}", tokenizer_id)
        if dst / rel not in paths:
            paths.append(dst / rel)
    return paths


# -------------------------------------------------------------------------------------------- compare
@dataclass
class Agreement:
    """Documents equal on both sides, out of all ids seen on either; what differs and why."""

    equal: int
    total: int
    only: dict[str, list[str]]
    mismatched: list[str]
    causes: dict[str, int]


def _cause(a: np.ndarray, b: np.ndarray, decode: Decode, added: np.ndarray) -> str:
    """A best guess at why two tokenizations of one document differ, from the decoded texts."""
    if any(np.isin(x[:-1], added).any() for x in (a, b)):
        return "an added-token string inside the text (e.g. '<|endoftext|>') is encoded differently"
    ta, tb = decode(a[:-1]), decode(b[:-1])
    if ta == tb:
        return "same text, different token ids (tokenizer merge or pre-tokenization)"
    if ta.strip() == tb.strip():
        return "surrounding whitespace: dolma tokenizes text.strip(), the other side the raw text"
    return "different text"


def compare(dolma: Side, olmax: Side, decode: Decode, added: np.ndarray, max_causes: int = 2000) -> Agreement:
    """Compare every document by id; classify up to `max_causes` of the differing ones."""
    ids = sorted(dolma.where.keys() | olmax.where.keys())
    only = {"dolma": [], "olmax": []}
    mismatched: list[str] = []
    equal = 0
    for doc_id in ids:
        if doc_id not in olmax.where:
            only["dolma"].append(doc_id)
        elif doc_id not in dolma.where:
            only["olmax"].append(doc_id)
        elif np.array_equal(dolma.doc(doc_id), olmax.doc(doc_id)):
            equal += 1
        else:
            mismatched.append(doc_id)
    causes: dict[str, int] = {}
    for doc_id in mismatched[:max_causes]:
        c = _cause(np.asarray(dolma.doc(doc_id)), np.asarray(olmax.doc(doc_id)), decode, added)
        causes[c] = causes.get(c, 0) + 1
    return Agreement(equal, len(ids), only, mismatched, causes)


def show_mismatch(doc_id: str, dolma: Side, olmax: Side, decode: Decode) -> None:
    """Print where a document's two tokenizations first part, as ids and as decoded text."""
    a, b = np.asarray(dolma.doc(doc_id)), np.asarray(olmax.doc(doc_id))
    n = min(len(a), len(b))
    diff = np.flatnonzero(a[:n] != b[:n])
    k = int(diff[0]) if len(diff) else n
    print(
        f"first mismatch: id {doc_id!r}: dolma {len(a):,} tokens, olmax {len(b):,}; first difference at "
        f"token {k}"
    )
    lo = max(0, k - 8)
    for name, x in (("dolma", a), ("olmax", b)):
        print(f"  {name}: ids {x[lo : k + 8].tolist()}")
        print(f"  {name}: text {decode(x[lo : k + 8])!r}")


# ---------------------------------------------------------------------------------------------- main
def resolve_tokenizer(name: str) -> Path:
    """A tokenizer.json path as given, or a name (`dolma2`) through olmax's offline asset resolver."""
    if Path(name).is_file():
        return Path(name)
    try:
        from olmax.assets import tokenizer_path
    except ImportError:
        sys.exit(f"cannot resolve tokenizer {name!r}: olmax.assets is not importable; pass --tokenizer PATH")
    return Path(tokenizer_path(name))


def _report(name: str, t: Timing, side: Side) -> float:
    """Print one tool's line (and any problems its output has); return its tokens per wall second."""
    rate = side.tokens / t.wall_s
    print(
        f"{name}: {t.wall_s:,.1f} s wall, {t.cpu_s:,.1f} s CPU, {side.tokens:,} tokens in "
        f"{len(side.where):,} docs, {rate:,.0f} tokens/s ({side.tokens / max(t.cpu_s, 1e-9):,.0f} per CPU-s)"
    )
    for p in side.problems[:5]:
        print(f"  {name} problem: {p}")
    if len(side.problems) > 5:
        print(f"  ... and {len(side.problems) - 5} more problems")
    if side.duplicates:
        print(f"  {name}: {side.duplicates:,} duplicate document ids")
    return rate


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description="Run AI2's `dolma tokens` and `olmax data prepare` on the same Dolma-format corpus, check "
        "that every document's tokens agree, and compare throughput. The last line printed is "
        "`prepare tokens/s olmax/dolma = N.Nx`. Exits 1 when any document differs or is missing on one side."
    )
    ap.add_argument(
        "--input-mb",
        type=float,
        default=160,
        help="corpus size in MB (10^6 bytes) of UTF-8 text; built once under bench/out/ and "
        "reused (default 160, at least 150 MiB)",
    )
    ap.add_argument(
        "--workers",
        type=int,
        default=2,
        help="parallel workers for each tool: dolma --processes, olmax --workers (default 2)",
    )
    ap.add_argument(
        "--tokenizer",
        default="dolma2",
        help="tokenizer.json path, or `dolma2` to resolve it through olmax.assets (default)",
    )
    ap.add_argument(
        "--keep",
        action="store_true",
        help="keep both tools' outputs under bench/out/run-<MB>mb/ (deleted by default); a kept "
        "dolma output is what --skip-dolma compares against",
    )
    ap.add_argument(
        "--skip-dolma",
        action="store_true",
        help="do not run dolma; compare with a kept dolma run of the same corpus if there is one",
    )
    ap.add_argument("--skip-olmax", action="store_true", help="run dolma only (to build a kept reference)")
    ap.add_argument(
        "--beam-options",
        default="--runner=DirectRunner --direct_num_workers={workers} --direct_running_mode=multi_processing",
        help="also run `olmax data prepare --runner beam` with these pipeline options (reference only: "
        "the DirectRunner is Beam's local test runner) and check its output is byte-identical to the "
        "local runner's; '' skips it",
    )
    args = ap.parse_args(argv)

    tok_path = resolve_tokenizer(args.tokenizer).resolve()
    digest = hashlib.sha256(tok_path.read_bytes()).hexdigest()
    note = "dolma2" if digest == DOLMA2_SHA256 else f"NOT dolma2 (sha256 {digest[:12]}...)"
    print(f"tokenizer: {tok_path} ({note})")

    corpus = build_corpus(args.input_mb)
    print(
        f"input: {corpus.root}: {corpus.text_bytes:,} bytes of text ({corpus.text_bytes / 1e6:,.1f} MB) in "
        f"{corpus.docs:,} docs ({', '.join(f'{k} {v:,}' for k, v in sorted(corpus.per_source.items()))}); "
        f"{N_INPUT_FILES} .jsonl.gz files, {corpus.gz_bytes / 1e6:,.1f} MB"
    )
    for p in sorted(corpus.root.glob("*.jsonl.gz")):  # warm the page cache so neither tool pays for it
        p.read_bytes()
    print(
        f"workers: {args.workers} each; load average before: {os.getloadavg()[0]:.1f} on "
        f"{os.cpu_count()} CPUs (other work on this machine slows both tools)"
    )

    run_dir = OUT / f"run-{args.input_mb:g}mb"
    run_dir.mkdir(parents=True, exist_ok=True)
    dolma_dst, olmax_dst = run_dir / "dolma", run_dir / "olmax"
    timing_file = dolma_dst / "bench-timing.json"
    key = {"corpus": str(corpus.root), "docs": corpus.docs, "tokenizer": digest, "workers": args.workers}

    dolma_t: Timing | None = None
    if not args.skip_dolma:
        dolma_t = run_dolma(corpus, tok_path, dolma_dst, args.workers)
        timing_file.write_text(json.dumps({**key, "wall_s": dolma_t.wall_s, "cpu_s": dolma_t.cpu_s}))
    elif (
        timing_file.exists()
        and {k: v for k, v in json.loads(timing_file.read_text()).items() if k in key} == key
    ):
        saved = json.loads(timing_file.read_text())
        dolma_t = Timing(saved["wall_s"], saved["cpu_s"])
        print(f"dolma: reusing the kept run in {dolma_dst}")
    olmax_t = None if args.skip_olmax else run_olmax(corpus, args.tokenizer, olmax_dst, args.workers)
    beam_line = None
    if olmax_t and args.beam_options:
        opts = args.beam_options.format(workers=args.workers)
        beam_dst = run_dir / "olmax-beam"
        beam_t = run_olmax(corpus, args.tokenizer, beam_dst, args.workers, beam=opts)
        diff = same_bytes(olmax_dst, beam_dst)
        tokens = json.loads((olmax_dst / "manifest.json").read_text())["sources"]["bench"]["tokens"]
        beam_line = (
            f"olmax --runner beam ({opts}): {beam_t.wall_s:.1f} s wall, {tokens / beam_t.wall_s / 1e6:.2f} M "
            f"tokens/s = {olmax_t.wall_s / beam_t.wall_s:.2f}x the local runner's "
            f"{tokens / olmax_t.wall_s / 1e6:.2f} M; output "
            + (
                "byte-identical to the local runner's"
                if not diff
                else f"DIFFERS in {len(diff)} files: {diff[:3]}"
            )
        )
        failed_beam = bool(diff)
        if not args.keep:
            shutil.rmtree(beam_dst, ignore_errors=True)
    else:
        failed_beam = False

    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tok_path))

    def decode(ids: np.ndarray) -> str:
        return tok.decode([int(i) for i in ids], skip_special_tokens=False)

    dolma = read_side("dolma tokens", dolma_shards(dolma_dst)) if dolma_t else None
    olmax = read_side("olmax prepare", olmax_shards(olmax_dst)) if olmax_t else None
    dolma_rate = _report("dolma tokens", dolma_t, dolma) if dolma and dolma_t else None
    olmax_rate = _report("olmax prepare", olmax_t, olmax) if olmax and olmax_t else None
    failed = failed_beam or any(s is not None and (s.problems or s.duplicates) for s in (dolma, olmax))
    if beam_line:
        print(beam_line)

    if dolma and olmax:
        # ids of the tokenizer's added tokens ('<|endoftext|>', '|||EMAIL_ADDRESS|||', ...): `tokenizers`
        # (and so dolma) turns these strings into single ids even inside a document's text.
        added = np.array(sorted(tok.get_added_tokens_decoder()), dtype=np.uint32)
        ag = compare(dolma, olmax, decode, added)
        print(
            f"agreement: {ag.equal:,} / {ag.total:,} docs equal; {len(ag.mismatched):,} differ; "
            f"{len(ag.only['dolma']):,} only in dolma, {len(ag.only['olmax']):,} only in olmax"
        )
        examined = sum(ag.causes.values())
        for cause, n in sorted(ag.causes.items(), key=lambda kv: -kv[1]):
            print(f"  {n:,} of the {examined:,} differing docs examined (in id order): {cause}")
        for side_name, missing in ag.only.items():
            if missing:
                print(f"  first only in {side_name}: {missing[0]!r}")
        if ag.mismatched:
            show_mismatch(ag.mismatched[0], dolma, olmax, decode)
        failed = failed or ag.equal != ag.total
    if not args.keep:
        shutil.rmtree(olmax_dst, ignore_errors=True)
        if not args.skip_dolma:
            shutil.rmtree(dolma_dst, ignore_errors=True)
    if dolma and olmax and dolma_t and olmax_t and dolma.tokens and olmax_t.cpu_s:
        # Other work on a shared machine stretches wall time; tokens per CPU-second is the steadier figure.
        per_cpu = (olmax.tokens / olmax_t.cpu_s) / (dolma.tokens / dolma_t.cpu_s)
        print(f"prepare tokens per CPU-s olmax/dolma = {per_cpu:.1f}x")
    if dolma_rate is not None and olmax_rate is not None:
        ratio = f"{olmax_rate / dolma_rate:.1f}x" if dolma_rate > 0 else "n/a (dolma wrote no tokens)"
    else:
        ratio = f"n/a ({'dolma' if dolma_rate is None else 'olmax'} not run)"
    print(f"prepare tokens/s olmax/dolma = {ratio}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
