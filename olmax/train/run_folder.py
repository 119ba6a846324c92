"""A training run's folder: where each of its files lives and which process writes it, in one object.

`olmax train --run-dir` takes a local path (a folder every process of the run sees: one host, or a disk
they share) or a bucket URL (`gs://`, `s3://`). `open_run_folder` turns it into a `RunFolder` once, after
JAX's distributed system is up, and the trainer, the checkpointer, the run record and the metrics log ask
it rather than deciding for themselves:

| file | where | written by |
|---|---|---|
| `config.yaml`, `history.jsonl`, `metrics.jsonl`, `tb/` | `local` (the folder, or this host's mirror of the bucket) | process 0 (`writes_record`) |
| `checkpoints/<step>/` | `local`, then the bucket | every process, its own shards |
| `checkpoints/<step>/olmax-files.json` (the seal) | `local` or the bucket | process 0, last |

A bucket run is trained in a local mirror (olmax.train.run_mirror), one per host: $OLMAX_RUN_STAGING (else
~/.cache/olmax/runs), with `process-<i>` under it when the run has several processes (hosts share no disk;
on one test machine the processes must not share a mirror either). Hosts of a pod share no folder, so
there each host's checkpointer writes its own shards into its own mirror (`per_host`: Orbax with every
host as primary of its own folder, one file per array shard, no shared OCDBT index), and `publish` puts
one step together in the bucket:

1. every process lists the files of its part of the step (sizes included) and the lists are exchanged
   (olmax.train.hosts); a file several hosts wrote alike (the tree's metadata) belongs to the lowest;
2. each process uploads the files it owns; all wait for all;
3. process 0 checks that the bucket holds every listed file at its size, then writes the seal (the union
   of the lists), then applies the retention and uploads the run's own files.

A step is complete in the bucket only with its seal and every file the seal lists (olmax.train.run_mirror),
so a step cut off at any point, by any process, is never read as complete. A run of several processes
resumes from the bucket's newest complete step: `open_run_folder` makes each host's mirror hold exactly
that step (the files it lacks downloaded, any newer partial step removed), whatever host wrote what and
however many processes there were. A bucket run of one process keeps its mirror as it is: a newer
complete step there (an upload cut short) is resumed and uploaded.

Why a mirror per host rather than Orbax writing the bucket itself: a checkpoint is written at local-disk
speed and the step loop goes on; what reaches the bucket is a set of whole objects the seal can verify;
and the same code path serves gs:// and s3:// (Orbax's rename-based commit is a copy of every object on
S3). The cost is local disk for one step's shards per host (for the 7B on v5e-256: docs/tpu.md).
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from olmax import storage
from olmax.errors import OlmaxError
from olmax.train.config import CheckpointConfig
from olmax.train.hosts import Hosts
from olmax.train.run_mirror import CHECKPOINTS, RunMirror, is_remote_run, staging_folder


@dataclass(frozen=True)
class RunFolder:
    """Where a run is trained (module docstring): `url`, the run folder as given; `local`, the folder this
    process writes (the folder itself, or its mirror on this host); `mirror`, a bucket run's RunMirror;
    `hosts`, the run's processes; `pulled`, the bucket's step brought into the mirror to resume (or None)."""

    url: str
    local: Path
    hosts: Hosts
    mirror: RunMirror | None = None
    pulled: int | None = None

    @property
    def writes_record(self) -> bool:
        """True on the process that writes config.yaml, history.jsonl, metrics.jsonl and the seals."""
        return self.hosts.index == 0

    @property
    def per_host(self) -> bool:
        """True when each host writes its shards into a folder of its own (a bucket run of several)."""
        return self.mirror is not None and self.hosts.several

    @property
    def checkpoints(self) -> Path:
        return self.local / CHECKPOINTS

    def step_url(self, step: int) -> str:
        """Where step `step` is read from by a rerun: the bucket's or the local folder's step."""
        base = self.url.rstrip("/") if self.mirror is not None else str(self.local.resolve())
        return f"{base}/{CHECKPOINTS}/{step}"

    def checkpointer(self, cfg: CheckpointConfig):
        """The Checkpointer of this run's checkpoints/ (olmax.train.checkpoint): one file per array shard
        in a bucket run (the evals then read a step's parameters alone), every host its own primary when
        hosts share no folder."""
        from olmax.train.checkpoint import Checkpointer, Layout

        return Checkpointer(
            self.checkpoints, cfg, Layout(per_array=self.mirror is not None, per_host=self.per_host)
        )

    def publish(self, ckpt, step: int, keep: int | None) -> None:
        """After step `step` was saved (every process calls it): a bucket run's steps reach the bucket. One
        process: every sealed step the bucket lacks (the newest save is sealed when the next one starts or
        the checkpointer closes), then the run's files. Several: `step` itself, put together (module
        docstring); this waits for its local write."""
        if self.mirror is None:
            return
        if not self.hosts.several:
            self.mirror.push(keep=keep)
            return
        from olmax.train.checkpoint import SEAL

        ckpt.wait()
        folder = self.checkpoints / str(step)
        mine = {
            str(f.relative_to(folder)): f.stat().st_size
            for f in sorted(folder.rglob("*"))
            if f.is_file() and f.name != SEAL
        }
        parts = self.hosts.allgather(f"publish-{step}", mine)
        owner: dict[str, int] = {}
        union: dict[str, int] = {}
        for i, files in enumerate(parts):
            for name, size in files.items():
                if name not in owner:
                    owner[name], union[name] = i, size
        self.mirror.upload_step_files(step, folder, [n for n in union if owner[n] == self.hosts.index])
        self.hosts.barrier(f"uploaded-{step}")
        if self.writes_record:
            self.mirror.seal_step(step, union, keep=keep)
        self.hosts.barrier(f"sealed-{step}")

    def finish(self, keep: int | None) -> None:
        """At the end of training, or at a stop, after the checkpointer closed: a one-process bucket run
        uploads the last step (sealed at the close) and the final record; a run of several uploads process
        0's record (its steps are in the bucket already)."""
        if self.mirror is None:
            return
        if not self.hosts.several:
            self.mirror.push(keep=keep)
        elif self.writes_record:
            self.mirror.push_files()

    def newest_complete(self) -> str:
        """Where a rerun resumes, in words (for the lines that end a run early)."""
        from olmax.train.checkpoint import complete_steps

        if self.mirror is not None:
            steps = self.mirror.complete_remote_steps()
        else:
            steps = complete_steps(self.checkpoints)
        if not steps:
            return f"{self.url} holds no complete checkpoint yet; rerunning the same command starts over"
        return (
            f"the newest complete checkpoint is {self.step_url(steps[0])}; rerun the same command to resume"
        )


def open_run_folder(run_dir: str, hosts: Hosts | None = None) -> RunFolder:
    """`olmax train --run-dir`'s folder for this process (module docstring): a local path as it is; a bucket
    URL's mirror on this host, brought to the bucket's newest complete step where a resume needs it."""
    hosts = hosts or Hosts.current()
    if not is_remote_run(run_dir):
        return RunFolder(run_dir, Path(storage.local_path(run_dir) or run_dir), hosts)
    storage.require_bucket(run_dir)
    local = staging_folder(run_dir, "train")
    if hosts.several:
        local = local / f"process-{hosts.index}"
    mirror = RunMirror(run_dir, "train", local)
    pulled = mirror.resume_step(exact=hosts.several)
    return RunFolder(mirror.url, mirror.local, hosts, mirror, pulled)


def reader_mirror(run: str, role: str) -> RunMirror | None:
    """How a reader of a run (`role` "watch" or "eval") reaches a bucket run: a mirror of its own that
    downloads a step's parameters and never its optimizer state; None for a local run, read where it is."""
    if not is_remote_run(run):
        return None
    storage.require_bucket(run)
    return RunMirror(run, role, reads="params")


def reader_folder(run: str, role: str) -> Path:
    """The local folder a reader reads `run` from: the folder itself, or its mirror for `role`."""
    if is_remote_run(run):
        return staging_folder(run.rstrip("/"), role)
    return Path(storage.local_path(run) or run)


def local_checkpoint(path: str) -> str:
    """Where a checkpoint given as `path` is read from: the path itself (a local folder or a `file://`
    URL's path), or for a run in object storage (its folder, or one of its `checkpoints/<step>` folders) its
    local mirror (role "eval"), holding the run's files and that step alone (default: the bucket's newest
    complete step): the mirror's run folder, or its `checkpoints/<step>`, as the evals read local runs."""
    if not is_remote_run(path):
        return storage.local_path(path) or path
    m = re.fullmatch(rf"(.+)/{CHECKPOINTS}/(\d+)/?", path)
    run_url, step = (m.group(1), int(m.group(2))) if m else (path.rstrip("/"), None)
    mirror = reader_mirror(run_url, "eval")
    complete = mirror.complete_remote_steps()
    if step is None and not complete:
        raise OlmaxError(f"{run_url}/{CHECKPOINTS}: no complete checkpoint in the store yet")
    if step is not None and step not in complete:
        have = ", ".join(map(str, complete[:5])) or "none"
        raise OlmaxError(f"{path}: not a complete checkpoint in the store (complete, newest first: {have})")
    want = complete[0] if step is None else step
    mirror.pull(want=lambda s: s == want)
    for old in (mirror.local / CHECKPOINTS).iterdir():  # the mirror keeps the one step read
        if old.is_dir() and old.name.isdigit() and int(old.name) != want:
            shutil.rmtree(old, ignore_errors=True)
    return str(mirror.local / CHECKPOINTS / str(want) if m else mirror.local)
