"""Benchmark `olmax data prepare` against AI2's `dolma tokens` on the same Dolma-format text.

What it does, in one run:
  1. builds (or reuses) a deterministic corpus of real text in Dolma format under bench/out/: Python
     source from the stdlib and from .venv's site-packages, and prose (pydoc topics, package READMEs
     and METADATA), shuffled with a fixed seed and split over a few `.jsonl.gz` files so each worker
     has files to take;
  2. runs, interleaved (A B C A B C ...), `dolma tokens` (dolma==1.2.1 in its own venv, built by
     bench/setup/setup_dolma.sh when missing) with `--workers` processes, `olmax data prepare --dolma-compat`
     at each of `--olmax-workers`, the tokenizer engine prepare chose, alone, on the very texts
     prepare tokenizes (bench/peers/engine_ceiling.py: no JSON, no decompression, no shards: the ceiling),
     prepare's reader alone, and prepare's own pieces called one after the other in a bare loop
     (bench/peers/engine_ceiling.py --pieces: the same shard bytes with nothing of prepare around them);
     every side is one process tree timed the same way (CPU and wall seconds, start to exit); past
     start-up, prepare's own CPU-seconds from its tokenizer's load to its manifest (its summary line:
     `time.process_time`, every thread) are set against the engine's encode calls (the same clock);
  3. reads dolma's and olmax's outputs only through their `.csv.gz` sidecars (`start,end,id,src,loc`, end
     exclusive; olmax's shards are found through its mix.txt) and compares the tokens of every document
     by id; checks olmax's outputs at every worker count are the same bytes;
  4. prints tokens per CPU-second and per wall second per side, olmax over the engine and over dolma,
     and writes the record (bench/record.py) to bench/results/tok.json (`--smoke`: a 5 MB corpus, one
     round, the record under bench/out/results/).

Exits non-zero when any document differs or is missing on one side, when olmax's outputs differ between
worker counts, or when a tool fails.
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
import re
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bench.harness import PROCESS_WALL, ROOT, WARM_CPU, interleaved, module_command, run_tree
from bench.record import Record, add_arguments, format_figure, package_version, pairwise_ratio

OUT = ROOT / "bench" / "out"
DOLMA_VENV = ROOT / ".venv-dolma"

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
    site = sorted((ROOT / ".venv" / "lib").glob("python3*/site-packages"))
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
    """Wall seconds, and CPU seconds of the whole process tree; `run_cpu_s`: what the tool says its work past
    start-up cost (olmax prepare's summary line), when it says."""

    wall_s: float
    cpu_s: float
    run_cpu_s: float | None = None


# prepare's summary line: `olmax: prepared N tokens in D docs in Ws, C CPU-s (R M tokens per CPU-second) → ...`
RUN_CPU = re.compile(r"^olmax: prepared [0-9,]+ tokens in [0-9,]+ docs in \S+, ([0-9.]+) CPU-s ", re.M)


# how every side's CPU seconds are taken (the same for all: prepare, dolma and the engine alone)
TREE_CPU = (
    "whole-process-tree CPU seconds (user + system), start to exit: the larger of the reaped children's "
    "rusage and the tree's /proc samples (each can only miss time, never add it)"
)


def _run_timed(name: str, cmd: list[str], log: Path) -> Timing:
    """Run `cmd` with its output sent to `log`: wall seconds and its process tree's CPU seconds (sampled
    from /proc too: getrusage misses dolma's multiprocessing workers)."""
    print(f"running {name}: {' '.join(cmd)}", flush=True)
    run = run_tree(cmd, log, period_s=0.2)
    if run.rc != 0:
        tail = log.read_text(errors="replace")[-4000:]
        sys.exit(f"{name} failed with exit code {run.rc}; last lines of {log}:\n{tail}")
    return Timing(run.wall_s, run.cpu_s)


def ensure_dolma() -> Path:
    """Path of the `dolma` command, building its venv with bench/setup/setup_dolma.sh when it is missing."""
    dolma = DOLMA_VENV / "bin" / "dolma"
    if not dolma.exists():
        subprocess.run(
            ["bash", str(ROOT / "bench" / "setup" / "setup_dolma.sh"), str(DOLMA_VENV)], check=True
        )
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
    log = dst.parent / f"olmax-w{workers}.log"
    t = _run_timed("olmax data prepare", cmd, log)
    found = RUN_CPU.search(log.read_text(errors="replace"))
    if found is None:
        sys.exit(f"olmax data prepare printed no CPU-seconds on its summary line; see {log}")
    t.run_cpu_s = float(found.group(1))
    return t


def dump_texts(corpus: Corpus) -> Path:
    """The texts prepare --dolma-compat tokenizes (stripped, empty ones left out), in input order, as
    `texts.bin` + `offsets.npy` for bench/peers/engine_ceiling.py; read with olmax's own reader, built once."""
    folder = corpus.root / "texts"
    if (folder / "offsets.npy").exists():
        return folder
    from olmax.data import readers

    tmp = corpus.root / "texts.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    offsets = [0]
    with open(tmp / "texts.bin", "wb") as f:
        for path in sorted(corpus.root.glob("*.jsonl.gz")):
            for doc in readers.read_documents(str(path), "text", "id", False, 0, readers.ReadStats()):
                text = doc.text.strip().encode("utf-8")
                if text:
                    f.write(text)
                    offsets.append(offsets[-1] + len(text))
    np.save(tmp / "offsets.npy", np.array(offsets, dtype=np.int64))
    tmp.rename(folder)
    return folder


def run_engine(texts: Path, tokenizer: str, dst: Path) -> tuple[Timing, dict]:
    """The chosen engine alone on the same texts, as its own process (bench/peers/engine_ceiling.py)."""
    dst.mkdir(parents=True, exist_ok=True)
    out = dst / "engine.json"
    cmd = module_command("bench.peers.engine_ceiling", str(texts), str(out), "--tokenizer", tokenizer)
    t = _run_timed("the engine alone", cmd, dst / "engine.log")
    return t, json.loads(out.read_text())


def run_reader(corpus: Corpus, dst: Path) -> tuple[Timing, dict]:
    """prepare's reader alone on the corpus files, as its own process (bench/peers/engine_ceiling.py --reader):
    what reading .jsonl.gz costs before any token exists."""
    dst.mkdir(parents=True, exist_ok=True)
    out = dst / "reader.json"
    cmd = module_command("bench.peers.engine_ceiling", "--reader", corpus.glob, str(out))
    t = _run_timed("the reader alone", cmd, dst / "reader.log")
    return t, json.loads(out.read_text())


def run_pieces(corpus: Corpus, dst: Path) -> tuple[Timing, dict]:
    """prepare's own pieces in one bare loop on the corpus files, as its own process
    (bench/peers/engine_ceiling.py --pieces): the least a pipeline made of them spends."""
    shutil.rmtree(dst, ignore_errors=True)
    dst.mkdir(parents=True)
    out = dst / "pieces.json"
    cmd = module_command("bench.peers.engine_ceiling", "--pieces", corpus.glob, str(out))
    t = _run_timed("prepare's pieces in a bare loop", cmd, dst / "pieces.log")
    return t, json.loads(out.read_text())


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


def _how_prepare_reads_and_writes() -> str:
    """Which of prepare's ways around the engine this machine has (docs/tokenizers.md)."""
    from olmax.data import readers, shards

    compiled = (
        "the compiled reader" if readers.native_jsonl is not None else "no compiled reader (no C compiler)"
    )
    return f"{compiled}; shards by {'direct I/O' if shards.direct_io else 'buffered writes'} where the disk allows"


def _olmax_tokens(dst: Path) -> int:
    return sum(src["tokens"] for src in json.loads((dst / "manifest.json").read_text())["sources"].values())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description="Run AI2's `dolma tokens`, `olmax data prepare` and prepare's tokenizer engine alone on the "
        "same Dolma-format corpus, interleaved; check that every document's tokens agree and compare tokens "
        "per CPU-second. Exits 1 when any document differs or is missing on one side."
    )
    ap.add_argument(
        "--input-mb",
        type=float,
        default=160,
        help="corpus size in MB (10^6 bytes) of UTF-8 text; built once under bench/out/ and reused (default "
        "160; 5 with --smoke)",
    )
    ap.add_argument("--workers", type=int, default=2, help="dolma's --processes (default 2)")
    ap.add_argument(
        "--olmax-workers", default="1,2", help="olmax --workers values to run, comma-separated (default 1,2)"
    )
    ap.add_argument("--reps", type=int, default=5, help="interleaved rounds (default 5; 1 with --smoke)")
    ap.add_argument(
        "--tokenizer",
        default="dolma2",
        help="tokenizer.json path, or `dolma2` to resolve it through olmax.assets (default)",
    )
    ap.add_argument(
        "--keep",
        action="store_true",
        help="keep the outputs under bench/out/run-<MB>mb/ (deleted by default)",
    )
    ap.add_argument("--skip-dolma", action="store_true", help="do not run dolma (no peer figures)")
    ap.add_argument(
        "--beam-options",
        default="",
        help="also run `olmax data prepare --runner beam` once with these pipeline options (e.g. "
        "'--runner=DirectRunner --direct_num_workers=2 --direct_running_mode=multi_processing') and check "
        "its output is byte-identical to the local runner's; default: skipped",
    )
    add_arguments(ap)
    args = ap.parse_args(argv)
    input_mb = 5 if args.smoke and args.input_mb == 160 else args.input_mb
    reps = 1 if args.smoke else args.reps
    olmax_workers = [int(w) for w in args.olmax_workers.split(",")]

    tok_path = resolve_tokenizer(args.tokenizer).resolve()
    digest = hashlib.sha256(tok_path.read_bytes()).hexdigest()
    note = "dolma2" if digest == DOLMA2_SHA256 else f"NOT dolma2 (sha256 {digest[:12]}...)"
    print(f"tokenizer: {tok_path} ({note})")
    corpus = build_corpus(input_mb)
    texts = dump_texts(corpus)
    print(
        f"input: {corpus.root}: {corpus.text_bytes:,} bytes of text ({corpus.text_bytes / 1e6:,.1f} MB) in "
        f"{corpus.docs:,} docs ({', '.join(f'{k} {v:,}' for k, v in sorted(corpus.per_source.items()))}); "
        f"{N_INPUT_FILES} .jsonl.gz files, {corpus.gz_bytes / 1e6:,.1f} MB"
    )
    for p in sorted(corpus.root.glob("*.jsonl.gz")):  # warm the page cache so no side pays for it
        p.read_bytes()

    run_dir = OUT / f"run-{input_mb:g}mb"
    run_dir.mkdir(parents=True, exist_ok=True)
    dolma_dst = run_dir / "dolma"
    olmax_dst = {w: run_dir / f"olmax-w{w}" for w in olmax_workers}
    timings: dict[str, list[Timing]] = {}
    infos: dict[str, list[dict]] = {"engine": [], "reader": [], "pieces": []}  # what each round's run wrote

    def timed(name: str, fn) -> Callable[[], float]:
        def call() -> float:
            t = fn()
            if isinstance(t, tuple):  # (timing, what the run wrote)
                t, info = t
                infos[name].append(info)
            timings.setdefault(name, []).append(t)
            return t.cpu_s

        return call

    sides: dict[str, Callable[[], float]] = {}
    if not args.skip_dolma:
        sides["dolma"] = timed("dolma", lambda: run_dolma(corpus, tok_path, dolma_dst, args.workers))
    for w in olmax_workers:
        sides[f"olmax-w{w}"] = timed(
            f"olmax-w{w}", lambda w=w: run_olmax(corpus, args.tokenizer, olmax_dst[w], w)
        )
    sides["engine"] = timed("engine", lambda: run_engine(texts, args.tokenizer, run_dir / "engine"))
    sides["reader"] = timed("reader", lambda: run_reader(corpus, run_dir / "reader"))
    sides["pieces"] = timed("pieces", lambda: run_pieces(corpus, run_dir / "pieces"))
    reader_info, pieces_info = infos["reader"], infos["pieces"]
    print(f"{reps} interleaved rounds of {', '.join(sides)}; load average before: {os.getloadavg()[0]:.1f}")
    interleaved(sides, reps=reps)

    failed = False
    first = olmax_dst[olmax_workers[0]]
    for w in olmax_workers[1:]:
        diff = same_bytes(first, olmax_dst[w])
        print(
            f"olmax --workers {w} output vs --workers {olmax_workers[0]}: "
            + (f"DIFFERS in {diff[:3]}" if diff else "byte-identical")
        )
        failed = failed or bool(diff)
    tokens = _olmax_tokens(first)
    runs = infos["engine"]
    if any(r["tokens"] != tokens for r in runs):
        print(f"the engine alone made {runs[0]['tokens']:,} tokens, prepare {tokens:,}: not the same texts")
        failed = True
    shards = [
        s
        for src in json.loads((first / "manifest.json").read_text())["sources"].values()
        for s in src["shards"]
    ]
    for info in pieces_info:
        same = info["tokens"] == tokens and (len(shards) != 1 or info["xxh64"] == shards[0]["xxh64"])
        if not same:
            print(
                f"prepare's pieces in a bare loop wrote {info['tokens']:,} tokens (xxh64 {info['xxh64']}), "
                f"prepare {tokens:,}: not prepare's work"
            )
            failed = True
    beam_line = None
    if args.beam_options:
        beam_dst = run_dir / "olmax-beam"
        beam_t = run_olmax(corpus, args.tokenizer, beam_dst, olmax_workers[-1], beam=args.beam_options)
        diff = same_bytes(olmax_dst[olmax_workers[-1]], beam_dst)
        beam_line = f"olmax --runner beam ({args.beam_options}): {beam_t.wall_s:.1f} s wall, output " + (
            "byte-identical to the local runner's"
            if not diff
            else f"DIFFERS in {len(diff)} files: {diff[:3]}"
        )
        failed = failed or bool(diff)
        print(beam_line)

    from tokenizers import Tokenizer

    hf = Tokenizer.from_file(str(tok_path))

    def decode(ids: np.ndarray) -> str:
        return hf.decode([int(i) for i in ids], skip_special_tokens=False)

    olmax_side = read_side("olmax prepare", olmax_shards(first))
    failed = failed or bool(olmax_side.problems or olmax_side.duplicates)
    agreement = None
    if not args.skip_dolma:
        dolma_side = read_side("dolma tokens", dolma_shards(dolma_dst))
        failed = failed or bool(dolma_side.problems or dolma_side.duplicates)
        added = np.array(sorted(hf.get_added_tokens_decoder()), dtype=np.uint32)
        ag = compare(dolma_side, olmax_side, decode, added)
        agreement = f"{ag.equal:,} / {ag.total:,} docs equal"
        print(
            f"agreement: {agreement}; {len(ag.mismatched):,} differ; "
            f"{len(ag.only['dolma']):,} only in dolma, {len(ag.only['olmax']):,} only in olmax"
        )
        for cause, n in sorted(ag.causes.items(), key=lambda kv: -kv[1]):
            print(f"  {n:,} differing docs: {cause}")
        if ag.mismatched:
            show_mismatch(ag.mismatched[0], dolma_side, olmax_side, decode)
        failed = failed or ag.equal != ag.total
        for t in timings["dolma"]:
            _report("dolma tokens", t, dolma_side)
    for w in olmax_workers:
        for t in timings[f"olmax-w{w}"]:
            _report(f"olmax prepare --workers {w}", t, olmax_side)

    rec = Record(
        "tok",
        argv=[str(Path(__file__))] + list(argv if argv is not None else sys.argv[1:]),
        smoke=args.smoke,
        results=args.results,
    )
    info = runs[0]
    rec.side(
        "olmax",
        version=package_version("olmax"),
        setting=f"data prepare --dolma-compat --workers {'/'.join(map(str, olmax_workers))}; engine "
        f"{info['engine']} (auto); {_how_prepare_reads_and_writes()}",
    )
    rec.side(
        "engine",
        version=f"{info['engine']} {info['engine_version']}",
        setting="bench/peers/engine_ceiling.py: load_tokenizer + Tokenizer.encode_utf8 (its fastest way in: the UTF-8 "
        "buffer itself) on one thread, 4 MB batches "
        "of the texts prepare tokenizes, already in memory",
        reason=info["engine_reason"],
    )
    if not args.skip_dolma:
        rec.side("dolma", version="1.2.1", setting=f"dolma tokens --processes {args.workers} --dtype uint32")
    per_cpu: dict[str, list[float]] = {}
    for name, ts in timings.items():
        side = "dolma" if name == "dolma" else "engine" if name == "engine" else "olmax"
        if name in ("reader", "pieces"):
            rec.timings(f"{name}.cpu", side, [t.cpu_s for t in ts], "s", TREE_CPU)
            continue
        n = dolma_side.tokens if name == "dolma" else tokens
        rec.timings(f"{name}.cpu", side, [t.cpu_s for t in ts], "s", TREE_CPU)
        rec.timings(f"{name}.wall", side, [t.wall_s for t in ts], "s", PROCESS_WALL)
        per_cpu[name] = [n / t.cpu_s / 1e6 for t in ts]
        key = name.replace("-", "_")
        rec.figure(f"{key}_tokens_per_cpu_s", per_cpu[name], "M tokens/CPU-s")
        rec.figure(f"{key}_tokens_per_wall_s", [n / t.wall_s / 1e6 for t in ts], "M tokens/s")
    rec.timings("engine.encode", "engine", [r["warm_cpu_s"] for r in runs], "s", WARM_CPU)
    warm = rec.figure(
        "engine_encode_tokens_per_cpu_s", [tokens / r["warm_cpu_s"] / 1e6 for r in runs], "M tokens/CPU-s"
    )
    lines = [f"engine alone, encode calls only: {format_figure(warm)} ({info['engine_reason']})"]
    rec.timings("reader.read", "olmax", [r["read_cpu_s"] for r in reader_info], "s", WARM_CPU)
    fig = rec.figure(
        "reader_over_engine_encode",
        [r["read_cpu_s"] / e["warm_cpu_s"] for r, e in zip(reader_info, runs)],
        "x",
        about="prepare's reader alone (decompression, JSON, documents), CPU seconds over the engine's encode "
        "calls, same round: what reading costs before any token",
    )
    lines.append(f"reader alone / engine encode calls, CPU seconds: {format_figure(fig, 2)}")
    rec.timings("pieces.run", "olmax", [r["warm_cpu_s"] for r in pieces_info], "s", WARM_CPU)
    fig = rec.figure(
        "pieces_over_engine_encode",
        [e["warm_cpu_s"] / r["warm_cpu_s"] for r, e in zip(pieces_info, runs)],
        "x",
        about="prepare's own pieces in one bare loop on one thread (bench/peers/engine_ceiling.py --pieces: read, "
        "parse, strip, encode, EOS, write, xxh64, sidecar; the same shard bytes), the engine's encode CPU "
        "seconds over theirs, same round: the best ratio a pipeline made of these pieces can show",
    )
    lines.append(f"prepare's pieces in a bare loop / engine encode calls: {format_figure(fig, 2)}")
    for name in per_cpu:
        lines.append(
            f"{name}: {format_figure(rec.data['figures'][name.replace('-', '_') + '_tokens_per_cpu_s'])}"
        )
    for w in olmax_workers:
        key = f"olmax-w{w}"
        fig = rec.figure(
            f"olmax_w{w}_over_engine",
            pairwise_ratio(per_cpu[key], per_cpu["engine"]),
            "x",
            about="tokens per CPU-second, both whole processes",
        )
        lines.append(f"olmax --workers {w} / engine alone, per CPU-s: {format_figure(fig, 2)}")
        rec.timings(
            f"{key}.run",
            "olmax",
            [t.run_cpu_s for t in timings[key]],
            "s",
            "prepare's own summary line: time.process_time (every thread) from before its first input is "
            "read to its manifest, after the tokenizer's load",
        )
        steady = [tokens / t.run_cpu_s / 1e6 for t in timings[key]]
        rec.figure(
            f"olmax_w{w}_steady_tokens_per_cpu_s",
            steady,
            "M tokens/CPU-s",
            about="start-up excluded: prepare's CPU-seconds past its tokenizer's load, as its summary line gives "
            "them (reading, tokenizing, writing, hashing, the manifest)",
        )
        fig = rec.figure(
            f"olmax_w{w}_steady_over_engine_encode",
            [a / (tokens / r["warm_cpu_s"] / 1e6) for a, r in zip(steady, runs)],
            "x",
            about="start-up excluded on both sides, same round: prepare as above, the engine's encode calls "
            "alone (both time.process_time inside the process)",
        )
        lines.append(f"olmax --workers {w} start-up excluded / engine encode calls: {format_figure(fig, 2)}")
        fig = rec.figure(
            f"olmax_w{w}_steady_over_pieces",
            [r["warm_cpu_s"] / t.run_cpu_s for r, t in zip(pieces_info, timings[key])],
            "x",
            about="start-up excluded, same round: the bare loop of prepare's pieces, CPU seconds, over "
            "prepare's (what prepare's threads, queues, journal and checks cost or save)",
        )
        lines.append(
            f"olmax --workers {w} start-up excluded / its pieces in a bare loop: {format_figure(fig, 2)}"
        )
        if not args.skip_dolma:
            fig = rec.figure(f"olmax_w{w}_over_dolma", pairwise_ratio(per_cpu[key], per_cpu["dolma"]), "x")
            lines.append(f"olmax --workers {w} / dolma, per CPU-s: {format_figure(fig)}")
    rec.note(
        "corpus",
        {
            "root": str(corpus.root.relative_to(ROOT)),
            "text_bytes": corpus.text_bytes,
            "docs": corpus.docs,
            "tokens": tokens,
        },
    )
    if agreement:
        rec.note("agreement_with_dolma", agreement)
    if beam_line:
        rec.note("beam", beam_line)
    print(f"record: {rec.write()}")
    print("\n".join(lines))
    if not args.keep:
        for d in [*olmax_dst.values(), dolma_dst, run_dir / "olmax-beam"]:
            shutil.rmtree(d, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
