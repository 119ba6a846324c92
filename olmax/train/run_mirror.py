"""A run folder in object storage (`s3://`, `gs://`, any fsspec URL but local paths and `file://`), kept in a
local folder: what `olmax train --run-dir URL` writes through, what `olmax eval watch --run URL` reads and
what the other eval commands read a `--checkpoint URL` through (olmax.train.run_folder.local_checkpoint: one
step at a time).

The trainer, Orbax and the evals read and write local files; a run whose folder is a URL lives in a local
mirror (`staging_folder`: $OLMAX_RUN_STAGING, else ~/.cache/olmax/runs, then `train/` or `watch/` and a
name made from the URL), synchronised with the bucket:

- `push` (the trainer, after each checkpoint and at the end): every sealed checkpoint step the bucket does
  not hold whole is uploaded file by file, its seal (`olmax-files.json`, the list of the step's files and
  sizes) last; then the bucket keeps the newest `keep` complete steps, as the local retention does. Then
  every other file of the run (config.yaml, metrics.jsonl, history.jsonl, TensorBoard events, evals/)
  whose size or modification time changed since the last push is uploaded whole.
- A step is complete in the bucket only when its seal is there and every file it lists is there with its
  size. An object appears whole or not at all, so an upload killed at any point leaves a step that is never
  read as complete (and that the next push finishes, skipping the files already there).
- `pull` (the watcher, before each poll; the trainer once, to resume on a machine that lacks the run):
  downloads the complete steps wanted that the mirror lacks (each into a scratch folder, then renamed into
  `checkpoints/`), removes the mirror's steps the bucket no longer holds, and downloads the other files the
  bucket changed since the last pull (the files under `keep_local`, the writer's own outputs, only when
  the mirror has none of them).
- A run of several processes has one mirror per host, each holding that host's shards of each step; the
  step is put together in the bucket by `upload_step_files` (each host its own files) and `seal_step`
  (process 0, last), and each host's mirror is brought to the bucket's newest complete step to resume
  (`resume_step(exact=True)`). olmax.train.run_folder says who does what.
- Readers (`reads="params"`: the eval commands and the watcher) download a step's parameters and never its
  optimizer state, where the step keeps one file per array (a bucket run's layout); a step kept in one
  OCDBT index (a local run copied to a bucket) is downloaded whole. The mirror's copy is sealed with the
  files it holds.
- One trainer per bucket run; the watcher writes only `evals/`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from pathlib import Path

from olmax import storage
from olmax.atomic import write_text
from olmax.errors import OlmaxError

STAGING_ENV = "OLMAX_RUN_STAGING"
CHECKPOINTS = "checkpoints"
STATE = ".olmax-mirror.json"  # the mirror's own record: what was pulled and pushed (never uploaded)
_SCRATCH = ".olmax-mirror-tmp"  # steps being downloaded (outside checkpoints/: no reader lists them)


def is_remote_run(run: str) -> bool:
    """True for a run folder given as a URL that is not a local `file://` one."""
    return storage.is_url(run) and storage.local_path(run) is None


def staging_folder(url: str, role: str) -> Path:
    """The local mirror of run `url` for `role` ("train" or "watch": a trainer and a watcher on one machine
    keep their own; an eval command's is `eval/`)."""
    root = Path(os.environ.get(STAGING_ENV) or Path.home() / ".cache" / "olmax" / "runs")
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", url.split("://", 1)[-1]).strip("-")[-80:]
    digest = hashlib.sha256(url.rstrip("/").encode()).hexdigest()[:10]
    return root / role / f"{name}-{digest}"


def _seal_names() -> tuple[str, str]:
    from olmax.train.checkpoint import COMMIT_MARKER, SEAL

    return SEAL, COMMIT_MARKER


class RunMirror:
    """Run folder `url` mirrored in `local` (default: `staging_folder(url, role)`)."""

    def __init__(self, url: str, role: str, local: str | os.PathLike | None = None, reads: str = "all"):
        """`reads`: "all" (the trainer: whole steps) or "params" (readers: no optimizer state)."""
        self.url = url.rstrip("/")
        self.reads = reads
        # the newest step download: {"step", "files", "bytes", "left_bytes"} (what stayed in the bucket)
        self.last_download: dict | None = None
        self.local = Path(local) if local is not None else staging_folder(self.url, role)
        self.fs, self.root = storage.url_filesystem(self.url)
        self.root = self.root.rstrip("/")
        self._state = self._read_state()

    # -------------------------------------------------------------------------------- the bucket's view
    def _listing(self) -> dict[str, dict]:
        """Every object under the run, keyed by its path relative to the run, with its info."""
        with storage.errors_named(self.url):
            self.fs.invalidate_cache()
            if not self.fs.exists(self.root):
                return {}
            found = self.fs.find(self.root, detail=True)
        base = self.root + "/"
        return {p[len(base) :]: info for p, info in found.items() if p.startswith(base)}

    def _remote_steps(self, listing: dict[str, dict]) -> tuple[dict[int, dict[str, int]], set[int]]:
        """({complete step: its sealed files and sizes}, steps with objects but not complete)."""
        seal_name, _ = _seal_names()
        files: dict[int, dict[str, int]] = {}
        for rel, info in listing.items():
            parts = rel.split("/", 2)
            if len(parts) == 3 and parts[0] == CHECKPOINTS and parts[1].isdigit():
                files.setdefault(int(parts[1]), {})[parts[2]] = int(info.get("size") or 0)
        complete: dict[int, dict[str, int]] = {}
        for step, have in files.items():
            if seal_name not in have:
                continue
            try:
                with storage.errors_named(self.url), _gone_is_none():
                    raw = self.fs.cat_file(self._remote(CHECKPOINTS, str(step), seal_name))
            except _Gone:
                continue  # removed since the listing
            try:
                sealed = json.loads(raw)
            except ValueError:
                continue  # a seal still being written by a store without whole uploads
            sealed = sealed.get("files", {}) if isinstance(sealed, dict) else {}
            if all(have.get(name) == size for name, size in sealed.items()):
                complete[step] = {**sealed, seal_name: have[seal_name]}
        return complete, set(files) - set(complete)

    def complete_remote_steps(self) -> list[int]:
        """The bucket's complete checkpoint steps, newest first."""
        return sorted(self._remote_steps(self._listing())[0], reverse=True)

    def resume_step(self, exact: bool) -> int | None:
        """Bring the mirror to where the trainer resumes; the bucket's step downloaded for it (None when
        nothing was). `exact` (a run of several processes, one mirror per host): the mirror holds the
        bucket's newest complete step and nothing newer, its missing files downloaded (a host's own part
        of a step is not the step). Else a newer complete step of the mirror's own (an upload cut short)
        is kept and resumed; the bucket's step is downloaded only when it is newer."""
        from olmax.train.checkpoint import complete_steps

        listing = self._listing()
        complete, _ = self._remote_steps(listing)
        newest = max(complete, default=None)
        local_ckpt = self.local / CHECKPOINTS
        pulled = None
        if exact:
            kept = set()
            if newest is not None:
                have = _sizes(local_ckpt / str(newest))
                if any(have.get(n) != size for n, size in complete[newest].items()):
                    self._download_step(newest, complete[newest], have=have)
                    pulled = newest
                kept.add(str(newest))
            for p in local_ckpt.iterdir() if local_ckpt.is_dir() else ():
                if p.name not in kept:  # newer parts, older steps, Orbax's temporaries
                    shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink()
        else:
            local = complete_steps(local_ckpt)
            if newest is not None and (not local or newest > local[0]):
                self._download_step(newest, complete[newest])
                pulled = newest
        self._pull_files(listing, ())
        return pulled

    def _remote(self, *parts: str) -> str:
        return "/".join([self.root, *parts])

    # -------------------------------------------------------------------------------- pull
    def pull(
        self,
        want: Callable[[int], bool] = lambda step: True,
        keep_local: Iterable[str] = (),
        newest_only: bool = False,
    ) -> list[int]:
        """Bring the mirror up to the bucket (the module's contract); returns the steps downloaded.
        `want(step)`: whether a complete step the mirror lacks is downloaded; `newest_only`: only the
        bucket's newest complete step is a candidate."""
        from olmax.train.checkpoint import complete_steps

        listing = self._listing()
        complete, _ = self._remote_steps(listing)
        self.local.mkdir(parents=True, exist_ok=True)
        local_ckpt = self.local / CHECKPOINTS
        have = set(complete_steps(local_ckpt))
        candidates = sorted(complete, reverse=True)[:1] if newest_only else sorted(complete)
        got = []
        for step in candidates:
            if step in have or not want(step):
                continue
            if self._download_step(step, complete[step]):
                got.append(step)
        if local_ckpt.is_dir() and not newest_only:  # the bucket's retention removed these
            for p in local_ckpt.iterdir():
                if p.is_dir() and p.name.isdigit() and int(p.name) not in complete:
                    shutil.rmtree(p, ignore_errors=True)
        self._pull_files(listing, tuple(keep_local))
        return got

    def _download_step(self, step: int, files: dict[str, int], have: dict[str, int] | None = None) -> bool:
        """Download a complete step into scratch, then rename it into checkpoints/; False when the bucket
        removed it meanwhile (its retention). `have`: files of the step the mirror holds already at their
        sealed size (moved over, not downloaded). A reader's copy (`reads="params"`) leaves out the
        optimizer state where the step allows and is sealed with what it holds."""
        seal_name, _ = _seal_names()
        tmp = self.local / _SCRATCH / str(step)
        shutil.rmtree(tmp, ignore_errors=True)
        final = self.local / CHECKPOINTS / str(step)
        wanted = reader_files(files) if self.reads == "params" else dict(files)
        try:
            with storage.errors_named(self.url), _gone_is_none():
                for name, size in wanted.items():
                    dest = tmp / name
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    if have and have.get(name) == size and name != seal_name:
                        os.replace(final / name, dest)
                        continue
                    self.fs.get_file(self._remote(CHECKPOINTS, str(step), name), str(dest))
        except _Gone:
            shutil.rmtree(tmp, ignore_errors=True)
            return False
        fetched = {n: s for n, s in wanted.items() if not (have and have.get(n) == s and n != seal_name)}
        self.last_download = {
            "step": step,
            "files": len(fetched),
            "bytes": sum(fetched.values()),
            "left_bytes": sum(files.values()) - sum(wanted.values()),
        }
        if len(wanted) < len(files):  # the reader's copy: its seal lists what it holds
            kept = {n: s for n, s in wanted.items() if n != seal_name}
            write_text(
                tmp / seal_name,
                json.dumps({"files": kept, "reads": self.reads}, indent=0, sort_keys=True) + "\n",
            )
        final.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(final, ignore_errors=True)  # an incomplete local copy of the same step
        os.replace(tmp, final)
        return True

    def _pull_files(self, listing: dict[str, dict], keep_local: tuple[str, ...]) -> None:
        pulled = self._state.setdefault("pulled", {})
        guarded = {k for k in keep_local if (self.local / k).exists()}
        for rel, info in sorted(listing.items()):
            if _own(rel) or rel.split("/", 1)[0] in guarded:
                continue
            version = [int(info.get("size") or 0), _version(info)]
            dest = self.local / rel
            if pulled.get(rel) == version and dest.exists():
                continue
            dest.parent.mkdir(parents=True, exist_ok=True)
            part = dest.with_name(dest.name + ".olmax-part")
            try:
                with storage.errors_named(self.url), _gone_is_none():
                    self.fs.get_file(self._remote(rel), str(part))
            except _Gone:
                part.unlink(missing_ok=True)
                continue
            os.replace(part, dest)
            pulled[rel] = version
            st = dest.stat()
            self._pushed()[rel] = [st.st_size, st.st_mtime_ns]  # the bucket holds these bytes already
        self._write_state()

    # -------------------------------------------------------------------------------- push
    def push(self, keep: int | None = None) -> list[int]:
        """Upload what the mirror has and the bucket lacks (the module's contract); returns the steps
        uploaded. `keep`: the bucket keeps its newest `keep` complete steps (None: all)."""
        from olmax.train.checkpoint import seal_mismatch

        seal_name, _ = _seal_names()
        listing = self._listing()
        complete, incomplete = self._remote_steps(listing)
        local_ckpt = self.local / CHECKPOINTS
        sealed = sorted(
            int(p.name)
            for p in (local_ckpt.iterdir() if local_ckpt.is_dir() else ())
            if p.is_dir() and p.name.isdigit() and (p / seal_name).is_file() and not seal_mismatch(p)
        )
        sent = []
        for step in sealed:
            if step in complete:
                continue
            folder = local_ckpt / str(step)
            sizes = json.loads((folder / seal_name).read_text())["files"]
            with storage.errors_named(self.url):
                for name in sorted(sizes):
                    there = listing.get(f"{CHECKPOINTS}/{step}/{name}")
                    if there and int(there.get("size") or 0) == sizes[name]:
                        continue  # uploaded by a push that was cut short
                    self.fs.put_file(str(folder / name), self._remote(CHECKPOINTS, str(step), name))
                self._check_kept(step, sizes)
                # the seal last: only then is the step complete there
                self.fs.put_file(str(folder / seal_name), self._remote(CHECKPOINTS, str(step), seal_name))
            complete[step] = {}
            sent.append(step)
        stale = [s for s in incomplete if s not in sealed]
        if keep is not None:
            stale += sorted(complete, reverse=True)[keep:]
        with storage.errors_named(self.url):
            for step in stale:
                self.fs.rm(self._remote(CHECKPOINTS, str(step)), recursive=True)
        self._push_files()
        return sent

    def _check_kept(self, step: int, sizes: dict[str, int]) -> None:
        """Before a step is sealed in the bucket: every file of it is there at the size uploaded, else one
        error (a store that kept other bytes would leave a step that no reader ever takes as complete)."""
        self.fs.invalidate_cache()
        base = self._remote(CHECKPOINTS, str(step)) + "/"
        kept = {p[len(base) :]: int(i.get("size") or 0) for p, i in self.fs.find(base, detail=True).items()}
        wrong = sorted(name for name, size in sizes.items() if kept.get(name) != size)
        if wrong:
            name = wrong[0]
            raise OlmaxError(
                f"{self.url}/{CHECKPOINTS}/{step}/{name}: the store holds {kept.get(name, 'no')} bytes where "
                f"{sizes[name]} were uploaded ({len(wrong)} file(s) so); the step is not sealed there: check "
                "the store, then rerun to upload it again"
            )

    def _pushed(self) -> dict:
        return self._state.setdefault("pushed", {})

    def push_files(self, under: str | None = None) -> None:
        """Upload the changed files of the run (not its checkpoints), or of the mirror's folder `under` alone
        (a watcher's evals/)."""
        self._push_files(under)

    def upload_step_files(self, step: int, folder: Path, names: list[str]) -> None:
        """Upload `names` (paths relative to the local step `folder`) into the bucket's step `step`: one
        host's part of a step (olmax.train.run_folder); files already there at their size are skipped."""
        base = self._remote(CHECKPOINTS, str(step))
        with storage.errors_named(self.url):
            self.fs.invalidate_cache()
            there = (
                {
                    p[len(base) + 1 :]: int(i.get("size") or 0)
                    for p, i in self.fs.find(base, detail=True).items()
                }
                if self.fs.exists(base)
                else {}
            )
            for name in names:
                if there.get(name) == (folder / name).stat().st_size:
                    continue
                self.fs.put_file(str(folder / name), f"{base}/{name}")

    def seal_step(self, step: int, files: dict[str, int], keep: int | None) -> None:
        """Process 0, once every host uploaded its part of step `step`: check that the bucket holds every
        file of `files` at its size, write the seal (the step is complete from then on), keep the newest
        `keep` complete steps, and upload the run's own files."""
        seal_name, _ = _seal_names()
        body = json.dumps({"files": dict(sorted(files.items()))}, indent=0, sort_keys=True) + "\n"
        with storage.errors_named(self.url):
            self._check_kept(step, files)
            self.fs.pipe_file(self._remote(CHECKPOINTS, str(step), seal_name), body.encode())
            if keep is not None:
                complete = sorted(self._remote_steps(self._listing())[0], reverse=True)
                for old in complete[keep:]:
                    self.fs.rm(self._remote(CHECKPOINTS, str(old)), recursive=True)
        self._push_files()

    def _push_files(self, under: str | None = None) -> None:
        pushed = self._pushed()
        for path in _run_files(self.local / under if under else self.local, self.local):
            rel = path.relative_to(self.local).as_posix()
            if path.name.endswith((".lock", ".olmax-part")):
                continue
            try:
                st = path.stat()
            except FileNotFoundError:
                continue  # replaced meanwhile (an atomic rewrite): the next push takes the new one
            version = [st.st_size, st.st_mtime_ns]
            if pushed.get(rel) == version:
                continue
            with storage.errors_named(self.url):
                self.fs.put_file(str(path), self._remote(rel))
            pushed[rel] = version
        self._write_state()

    # -------------------------------------------------------------------------------- the mirror's record
    def _read_state(self) -> dict:
        try:
            state = json.loads((self.local / STATE).read_text())
        except (OSError, ValueError):
            return {"url": self.url}
        if state.get("url") != self.url:
            raise OlmaxError(
                f"{self.local}: the local mirror of another run ({state.get('url')}); set "
                f"{STAGING_ENV} to another folder"
            )
        return state

    def _write_state(self) -> None:
        self.local.mkdir(parents=True, exist_ok=True)
        self._state["url"] = self.url
        write_text(self.local / STATE, json.dumps(self._state, indent=0, sort_keys=True) + "\n")


class _Gone(OlmaxError):
    """An object listed a moment ago is not there any more (the writer's retention removed it). An
    OlmaxError so that `storage.errors_named` passes it on as it is; always caught in this module."""


@contextmanager
def _gone_is_none():
    """Inside `storage.errors_named`: a missing object is `_Gone`, not a storage failure."""
    try:
        yield
    except FileNotFoundError:
        raise _Gone("removed since it was listed") from None


def _run_files(folder: Path, root: Path) -> list[Path]:
    """The files under `folder` that the run-file sync uploads: not descending into checkpoints/ (where
    Orbax's temporary folders come and go) or the mirror's own."""
    out: list[Path] = []
    try:
        entries = sorted(folder.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return out
    for entry in entries:
        if _own(entry.relative_to(root).as_posix()):
            continue
        if entry.is_dir():
            out += _run_files(entry, root)
        elif entry.is_file():
            out.append(entry)
    return out


def _own(rel: str) -> bool:
    """Files the run-file sync leaves alone: checkpoints (synced by step), moved-aside steps, the mirror's own."""
    top = rel.split("/", 1)[0]
    return top in (STATE, _SCRATCH) or top == CHECKPOINTS or top.startswith(CHECKPOINTS + "-")


def _version(info: dict) -> str:
    """What tells a changed object apart (its etag, generation or modification time)."""
    for key in ("ETag", "etag", "md5Hash", "generation", "LastModified", "updated", "mtime"):
        if info.get(key) is not None:
            return str(info[key])
    return ""


def _sizes(folder: Path) -> dict[str, int]:
    """{path relative to `folder`: size} of every file under it ({} when it does not exist)."""
    if not folder.is_dir():
        return {}
    return {str(f.relative_to(folder)): f.stat().st_size for f in folder.rglob("*") if f.is_file()}


OPTIMIZER_PREFIX = "state/opt."  # a step's optimizer state, one folder per array (a per-array layout)


def reader_files(files: dict[str, int]) -> dict[str, int]:
    """The files of a step that a reader of its parameters needs: all but the optimizer state's arrays,
    where each array has files of its own; every file where the step keeps its arrays in one OCDBT index."""
    if any(n.startswith("state/ocdbt.") or n == "state/manifest.ocdbt" for n in files):
        return dict(files)
    return {n: s for n, s in files.items() if not n.startswith(OPTIMIZER_PREFIX)}
