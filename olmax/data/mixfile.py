"""Read a data mix: OLMo-core `label,path` files and `olmax data prepare`'s `DIR/mix.txt`.

Contract: `read_mix` returns the token files in mix order (that order fixes the global instance
numbering, so it is never sorted or deduplicated) with one label per file. Lines are `label,path`;
blank lines and lines starting with `#` are skipped; `{TOKENIZER}` in a path is replaced by the
tokenizer id. A relative path resolves against `base_dir` when given, else against the folder of the
mix file itself. Paths may be local or fsspec URLs (`s3://`, `gs://`, `https://`, `file://`,
`memory://`); absolute paths and URLs are kept as written.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import numpy as np

from olmax.errors import OlmaxError
from olmax.storage import is_url

# `olmo-core:NAME` reads NAME.txt from the installed OLMo-core package (its official mixes).
OLMO_CORE_PREFIX = "olmo-core:"

# Which tokenizer directory name OLMo-core substitutes for `{TOKENIZER}` when the tokenizer is dolma2:
# the OLMo 3 mixes were written under the name "dolma3-tokenizer" (the same vocabulary as dolma2),
# and the perplexity sets under a bare "dolma2-tokenizer".
_DOLMA3_NAMED = (
    "OLMo-mix-0625-official",
    "OLMo-mix-0925-official",
    "OLMo-midtraining-mix-",
    "OLMo-longmino-mix-",
)
_BARE_NAMED = ("v3-small-ppl-validation", "c4-ppl-validation", "code-fresh-ppl-validation")
DEFAULT_TOKENIZER_ID = "allenai/dolma2-tokenizer"


@dataclass(frozen=True)
class Mix:
    """Token files in mix order, one label per file, and where the mix was read from."""

    paths: tuple[str, ...]
    labels: tuple[str, ...]
    origin: str

    @property
    def label_names(self) -> tuple[str, ...]:
        """Distinct labels in order of first appearance; `label_ids` index into this."""
        return tuple(dict.fromkeys(self.labels))

    @property
    def label_ids(self) -> np.ndarray:
        """int32 (F,): the source id of each file."""
        ids = {name: i for i, name in enumerate(self.label_names)}
        return np.asarray([ids[label] for label in self.labels], dtype=np.int32)


def join_path(base: str, rel: str) -> str:
    """Join a relative path onto a local folder or a URL prefix."""
    if is_url(base):
        return base.rstrip("/") + "/" + rel.lstrip("/")
    return os.path.join(base, rel)


def default_tokenizer_id(mix_name: str) -> str:
    """The `{TOKENIZER}` value OLMo-core uses for mix `mix_name` with the dolma2 tokenizer."""
    stem = os.path.basename(mix_name)
    stem = stem[:-4] if stem.endswith(".txt") else stem
    if stem.startswith(_DOLMA3_NAMED):
        return "allenai/dolma3-tokenizer"
    if stem in _BARE_NAMED:
        return "dolma2-tokenizer"
    return DEFAULT_TOKENIZER_ID


def _read_text(mix: str) -> tuple[str, str | None]:
    """The mix file's text and the folder its relative paths resolve against (None: must be given)."""
    if mix.startswith(OLMO_CORE_PREFIX):
        name = mix[len(OLMO_CORE_PREFIX) :]
        try:
            import importlib.resources as resources

            text = (resources.files("olmo_core") / "data" / "mixes" / f"{name}.txt").read_text()
        except (ModuleNotFoundError, FileNotFoundError) as e:
            raise OlmaxError(
                f"{mix}: no official mix named {name!r} in the installed OLMo-core "
                f"({e}); check the name against olmo_core/data/mixes/*.txt"
            ) from e
        return text, None
    if is_url(mix):
        return _read_url(mix), mix.rsplit("/", 1)[0]
    if not os.path.isfile(mix):
        raise missing_mix(mix)
    with open(mix, "rb") as f:
        data = f.read()
    return _decode(mix, data), os.path.dirname(os.path.abspath(mix))


def _read_url(mix: str) -> str:
    """A mix file's text from an fsspec URL. Beside it, a prepare journal without manifest.json (uploaded
    last) is an unfinished `olmax data prepare` output: refused, whether its mix.txt is there or not."""
    from olmax import storage
    from olmax.data.shards import PREPARE_JOURNAL

    folder = mix.rsplit("/", 1)[0]
    if not storage.exists(storage.join(folder, "manifest.json")) and storage.exists(
        storage.join(folder, PREPARE_JOURNAL)
    ):
        raise OlmaxError(
            f"{mix}: {folder} is an unfinished `olmax data prepare` output (its {PREPARE_JOURNAL} is there, "
            "manifest.json is uploaded last and is not); rerun the `olmax data prepare` command with "
            "--overwrite to write it again"
        )
    try:
        data = storage.read_bytes(mix)
    except OlmaxError as e:
        reason = str(e).removeprefix(f"{mix}: ")
        raise OlmaxError(f"{mix}: cannot read the mix file: {reason}") from None
    return _decode(mix, data)


def _decode(mix: str, data: bytes) -> str:
    """A mix file's bytes as text; invalid UTF-8 is an error naming the line and the byte offset."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise OlmaxError(
            f"{mix}:{line}: invalid UTF-8 at byte offset {e.start} "
            f"({e.reason}); a mix file is UTF-8 text of 'label,path' lines"
        ) from None


def missing_mix(mix: str) -> OlmaxError:
    """The error for a local mix path that is not a file: an unfinished `olmax data prepare` output (its
    journal there, no mix.txt yet: a killed run, finished by rerunning it), else a mix that is not there."""
    from olmax.data.shards import PREPARE_JOURNAL

    folder = mix if os.path.isdir(mix) else os.path.dirname(mix)
    if os.path.isfile(os.path.join(folder, PREPARE_JOURNAL)) and not os.path.isfile(
        os.path.join(folder, "mix.txt")
    ):
        return OlmaxError(
            f"{mix}: {folder} is an unfinished `olmax data prepare` output (a killed run: its "
            f"{PREPARE_JOURNAL} is there, mix.txt is written last); rerun the same `olmax data prepare` "
            "command to finish it"
        )
    return OlmaxError(
        f"{mix}: mix file not found; pass --mix PATH (or data.mix=PATH) to a `label,path` file "
        f"(e.g. DIR/mix.txt written by `olmax data prepare`)"
    )


def parse_mix(text: str, *, origin: str, base_dir: str | None, tokenizer: str, confined: bool = False) -> Mix:
    """Parse mix text; `origin` names the file in errors, `base_dir` anchors relative paths. `confined`
    (relative paths anchored at the mix file's own folder, no --base-dir given) refuses a relative path
    that climbs out of that folder."""
    paths: list[str] = []
    labels: list[str] = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        label, comma, path = line.partition(",")
        label, path = label.strip(), path.strip()
        if not comma or not label or not path:
            raise OlmaxError(
                f"{origin}:{lineno}: expected 'label,path', got {raw!r}; "
                f"each data line needs a source label, a comma and a token file path"
            )
        path = path.replace("{TOKENIZER}", tokenizer)
        if not (is_url(path) or os.path.isabs(path)):
            if base_dir is None:
                raise OlmaxError(
                    f"{origin}:{lineno}: relative path {path!r} needs a base; pass "
                    f"--base-dir (a local mirror or a URL such as s3://ai2-llm)"
                )
            if confined and os.path.normpath(path).split(os.sep)[0] == os.pardir:
                raise OlmaxError(
                    f"{origin}:{lineno}: relative path {path!r} points outside the mix file's "
                    f"folder; pass --base-dir to say what it is relative to, or write it absolute"
                )
            path = join_path(base_dir, path)
        paths.append(path)
        labels.append(label)
    if not paths:
        raise OlmaxError(
            f"{origin}: the mix is empty (no 'label,path' lines); add token files to it "
            f"or point --mix at the mix.txt that `olmax data prepare` wrote"
        )
    return Mix(paths=tuple(paths), labels=tuple(labels), origin=origin)


def read_mix(mix: str, *, base_dir: str | None = None, tokenizer: str | None = None) -> Mix:
    """Read mix `mix` (a path, an fsspec URL, or `olmo-core:NAME` for an official OLMo-core mix).

    `tokenizer` replaces `{TOKENIZER}`; by default it is the tokenizer folder recorded in a sibling
    `manifest.json` (a `olmax data prepare` output), else the name OLMo-core uses for dolma2 with this
    mix (see `default_tokenizer_id`). Missing token files are reported later, by `build_index`.
    """
    mix = os.fspath(mix)
    text, folder = _read_text(mix)
    if base_dir is not None:
        base_dir = base_dir if is_url(base_dir) else os.path.abspath(base_dir)
    name = mix.removeprefix(OLMO_CORE_PREFIX)
    if tokenizer is None and folder is not None and not is_url(folder):
        tokenizer = _prepared_tokenizer_id(os.path.join(folder, "manifest.json"))
    return parse_mix(
        text,
        origin=mix,
        base_dir=base_dir or folder,
        tokenizer=tokenizer or default_tokenizer_id(name),
        confined=base_dir is None and folder is not None and not is_url(folder),
    )


def _prepared_tokenizer_id(manifest: str) -> str | None:
    """The `{TOKENIZER}` folder a prepare output used (None when there is no readable manifest)."""

    try:
        with open(manifest, encoding="utf-8") as f:
            return json.load(f).get("tokenizer", {}).get("id")
    except (OSError, ValueError, AttributeError):
        return None
