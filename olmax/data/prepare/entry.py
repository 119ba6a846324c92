"""`olmax data prepare`'s entry: checks the sources, expands the inputs (paths, globs, folders or fsspec URLs),
then runs the local runner (local_runner.py) or the Apache Beam one (prepare_beam.py) into the output folder, or
into a staging folder that is uploaded to an object-store URL when complete (mix.txt and manifest.json last).
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

from olmax import storage
from olmax.assets import tokenizer_path
from olmax.atomic import exclusive
from olmax.data import readers
from olmax.data.prepare.local_runner import (
    STATE_FILE,
    PrepareConfig,
    check_label,
    prepare_into,
    settings_of,
)
from olmax.data.tokenize import load_tokenizer
from olmax.errors import OlmaxError


def prepare(cfg: PrepareConfig, beam_options: str | None = None) -> dict:
    """Run prepare end to end; returns the manifest (also written to DIR/manifest.json). `beam_options`
    (Beam's flags) runs it as an Apache Beam pipeline (prepare_beam.py) with the same output bytes.

    `cfg.out` may be an fsspec URL: the local runner prepares into a staging folder and uploads it at the
    end (mix.txt and manifest.json last); the Beam workers upload each shard as it closes."""

    if not cfg.sources:
        raise OlmaxError("no sources: give LABEL=PATH_OR_GLOB arguments or --mix-spec FILE.yaml")
    labels = [s.label for s in cfg.sources]
    for label in labels:
        check_label(label)
    if len(set(labels)) != len(labels):
        raise OlmaxError(f"source labels must be unique; got {labels}")
    if cfg.dedup is not None:
        cfg.dedup.check()
    if cfg.shard_bytes < 4:
        raise OlmaxError(f"--shard-size must be at least 4 bytes; got {cfg.shard_bytes}")
    # a file:// input is a local path: the same settings (and manifest) as the path itself
    cfg = replace(
        cfg,
        sources=tuple(
            replace(s, inputs=tuple(storage.local_path(i) or i for i in s.inputs)) for s in cfg.sources
        ),
    )
    storage.require_bucket(cfg.out)  # a missing bucket is found before anything is read or written
    tok_path = tokenizer_path(cfg.tokenizer)
    tok = load_tokenizer(str(tok_path), cfg.engine)
    files = {
        s.label: [f for pattern in s.inputs for f in readers.expand_inputs(pattern)] for s in cfg.sources
    }
    local = storage.local_path(cfg.out)
    if local is not None:
        out = Path(local)
        with exclusive(out, "olmax data prepare"):
            if beam_options is not None:
                from olmax.data.prepare.prepare_beam import prepare_beam

                return prepare_beam(cfg, out, None, tok, tok_path, files, beam_options)
            return prepare_into(cfg, out, tok, tok_path, files)
    existing = storage.list_files(cfg.out)
    if existing and not cfg.overwrite:
        return finished_remote_output(cfg.out, existing, settings_of(cfg, tok, files))
    if existing:
        storage.remove_tree(cfg.out)
    staged = storage.StagedDir(cfg.out)
    try:
        if beam_options is not None:
            from olmax.data.prepare.prepare_beam import prepare_beam

            manifest = prepare_beam(cfg, Path(staged.local), cfg.out, tok, tok_path, files, beam_options)
        else:
            manifest = prepare_into(cfg, Path(staged.local), tok, tok_path, files)
        staged.commit(last=(STATE_FILE, "mix.txt", "manifest.json"))
        return manifest
    finally:
        staged.cleanup()


def finished_remote_output(out: str, existing: list[str], settings: dict) -> dict:
    """A non-empty object-store output, never written to here: a finished run of these very settings and
    inputs is the result (its manifest; nothing to do); anything else is refused with what it is. An
    output without its manifest.json (uploaded last) is unfinished, never taken as complete."""
    if STATE_FILE not in existing:
        raise OlmaxError(
            f"output {out} is not empty ({len(existing)} files, e.g. {existing[0]}); pass "
            "--overwrite to replace its contents, or choose a new --out"
        )
    if "manifest.json" not in existing:
        raise OlmaxError(
            f"output {out} holds an unfinished prepare output (its {STATE_FILE} but no manifest.json, which "
            "is uploaded last: a run into it stopped before the end); pass --overwrite to start over, or "
            "choose a new --out"
        )
    try:
        saved = json.loads(storage.read_bytes(storage.join(out, STATE_FILE)))
        manifest = json.loads(storage.read_bytes(storage.join(out, "manifest.json")))
    except ValueError as e:
        raise OlmaxError(
            f"output {out}: its {STATE_FILE} or manifest.json is not valid JSON ({e}); pass --overwrite to "
            "start over, or choose a new --out"
        ) from None
    if saved.get("settings") != settings:
        raise OlmaxError(
            f"output {out} holds a finished prepare output with other settings or changed inputs (see "
            f"{storage.join(out, STATE_FILE)}); pass --overwrite to replace it, or choose a new --out"
        )
    print(
        f"olmax: {out} is already prepared from these inputs with these settings: nothing to do "
        "(nothing was written)",
        file=sys.stderr,
    )
    return manifest
