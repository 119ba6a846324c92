"""The loader audit's content pass over a mix in a bucket against the same mix on local disk, in one run:
bench/peers/audit_mix.py's generated mix (its planted copied shard, duplicate documents and repeated windows)
served by moto's S3 server and by the GCS emulator on loopback, each in a process of its own, and read in
place (olmax/data/token_reads.py: byte ranges, several requests in flight, read-ahead).

Per store: start the server, upload the mix, then rounds of `local, bucket` (interleaved, so both see the
same load), each audit in a fresh process (`--child`): `audit loader --epochs 1` with its content checks,
two threads. Figures: each side's content rate (tokens / the report's `content_seconds`: the map, the
reduces and the window checks), the bucket's over the local rate per round, the requests and bytes the
bucket pass asked for and the most requests in flight (olmax.ranged.stats). Every bucket report must
equal the local one but its timing (the plants found the same), else the run exits 1.

The servers, each as shipped but for one thing: moto keeps each object in memory (its key buffer set above
the largest object) and answers a ranged GET by reading the object's whole value and slicing it; its
in-memory buffer is over-allocated by its writes, so each of those reads copies the whole object (two
copies of a 200 MB shard for every 16 MiB range, where S3 reads the range). `--serve-s3` runs moto's server
with its buffers trimmed to size once written, so a whole-value read is a reference and a ranged GET
costs its range. The GCS emulator (gcp-storage-emulator) keeps objects in memory, copies the whole object
for every ranged read and serves one request at a time; it is run unchanged, so its figure is mostly the
emulator's.

    .venv/bin/python -m bench.peers.audit_bucket --out /tmp/audit-bucket [--tokens 2e9] [--stores s3,gs]
    .venv/bin/python -m bench.peers.audit_bucket --smoke          # 20 M tokens, both stores
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

from bench.harness import PROCESS_WALL, ROOT, module_command, report, run_child
from bench.peers.audit_mix import SEED, G, L, comparable, found, generate
from bench.record import Record, add_arguments, package_version

S3_ENV = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1"}
GS_ENV = {"GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false", "NO_GCE_CHECK": "true"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_s3(port: int) -> None:
    """moto's S3 server on 127.0.0.1:`port` (this process), its keys' in-memory buffers trimmed to their
    size after each write (the module docstring)."""
    from moto import server
    from moto.s3 import models

    setter = models.FakeKey.value.fset

    def set_value(self, new_value: bytes) -> None:
        setter(self, new_value)
        held = getattr(self._value_buffer, "_file", None)  # SpooledTemporaryFile's BytesIO while in memory
        if hasattr(held, "getvalue"):
            held.getvalue()  # CPython trims the buffer to its size: later whole reads return it, uncopied

    models.FakeKey.value = models.FakeKey.value.setter(set_value)
    server.main(["-H", "127.0.0.1", "-p", str(port)])


def start_server(store: str, largest: int, log) -> tuple[subprocess.Popen, dict[str, str]]:
    """The store's server in a process of its own on a free loopback port, and the environment that
    reaches it."""
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    if store == "s3":
        cmd = module_command("bench.peers.audit_bucket", "--serve-s3", str(port))
        server_env = {"MOTO_S3_DEFAULT_KEY_BUFFER_SIZE": str(largest + (1 << 20))}
        env = {**S3_ENV, "AWS_ENDPOINT_URL": endpoint}
    else:
        cmd = [sys.executable, "-m", "gcp_storage_emulator", "start", "-H", "127.0.0.1", "--port", str(port)]
        cmd += ["--in-memory", "-q"]
        server_env, env = {}, {**GS_ENV, "STORAGE_EMULATOR_HOST": endpoint}
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env={**os.environ, **server_env}, stdout=log, stderr=subprocess.STDOUT
    )
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, env
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the {store} server did not start") from None
            time.sleep(0.2)


def upload(folder: Path, store: str, env: dict[str, str]) -> str:
    """The mix's files (token files and mix.txt) into a new bucket; the bucket folder's URL."""
    os.environ.update(env)
    import fsspec

    fs = fsspec.filesystem(store, skip_instance_cache=True, **({"token": "anon"} if store == "gs" else {}))
    bucket = f"olmax-bench-{uuid.uuid4().hex[:8]}"
    fs.mkdir(bucket)
    for p in sorted(folder.iterdir()):
        if p.suffix == ".npy" and p.name != "base-docs.npy" or p.name == "mix.txt":
            fs.put_file(str(p), f"{bucket}/mix/{p.name}")
    return f"{store}://{bucket}/mix"


def child(mix: str, work: str) -> dict:
    """One content pass (audit loader --epochs 1, two threads) in this process; its report and what it
    asked of the store."""
    from olmax import ranged
    from olmax.audit.loader_audit import LoaderAuditConfig, audit_loader
    from olmax.data.stream import StreamSpec

    spec = StreamSpec(mix=mix, seq_len=L, global_batch_size=G, seed=SEED, work_dir=work)
    report = audit_loader(LoaderAuditConfig(stream=spec, epochs=1, threads=2))
    report["ranged"] = ranged.stats()
    return report


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds process `pid` has used so far (Linux's /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def audit_in_child(
    name: str, mix: str, out: Path, env: dict[str, str], server: int | None
) -> tuple[dict, dict]:
    """One audit in a fresh process: its report, and its wall seconds, its CPU seconds and the server's
    (process `server`, when one serves it) over the same time."""
    shutil.rmtree(out / "work", ignore_errors=True)
    cmd = module_command("bench.peers.audit_bucket", "--child", name, "--mix", mix, "--out", str(out))
    served = cpu_seconds(server) if server else 0.0
    run = run_child(cmd, env={**os.environ, **env}, check=True)
    cost = {
        "wall": run.wall_s,
        "cpu": run.cpu_s,
        "server_cpu": cpu_seconds(server) - served if server else 0.0,
    }
    return run.result, cost


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(ap)
    ap.add_argument("--out", default="bench/out/audit-bucket")
    ap.add_argument("--tokens", type=float, default=None, help="default 2e9 (--smoke: 20e6)")
    ap.add_argument("--files", type=int, default=40)
    ap.add_argument(
        "--rounds", type=int, default=None, help="local/bucket rounds per store (default 2; --smoke 1)"
    )
    ap.add_argument("--stores", default="s3,gs")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--serve-s3", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--mix", help=argparse.SUPPRESS)
    args = ap.parse_args()
    out = Path(args.out).resolve()
    if args.serve_s3:
        serve_s3(args.serve_s3)
        return 0
    if args.child:
        report(**child(args.mix, str(out / "work")))
        return 0

    from olmax.data.token_reads import BLOCK_BYTES, INFLIGHT

    rec = Record("audit_bucket", argv=sys.argv, smoke=args.smoke, results=args.results)
    tokens = int(args.tokens if args.tokens is not None else 20e6 if args.smoke else 2e9)
    rounds = args.rounds or (1 if args.smoke else 2)
    folder = out / f"mix-{tokens}-{args.files}"
    mix, expected = generate(folder, tokens, args.files)
    largest = max(p.stat().st_size for p in folder.glob("*.npy"))
    rec.side(
        "olmax",
        version=package_version("olmax"),
        setting=f"audit loader --epochs 1 --threads 2, content checks; a bucket's files read in {BLOCK_BYTES >> 20} "
        f"MiB ranges, {INFLIGHT} ahead of the one in use per reader",
    )
    rec.side("moto", version=package_version("moto"), setting="moto.server, objects in memory, own process")
    rec.side(
        "gcp-storage-emulator",
        version=package_version("gcp-storage-emulator"),
        setting="--in-memory, own process",
    )
    failed, log = [], open(out / "servers.log", "ab")
    for store in args.stores.split(","):
        server, env = start_server(store, largest, log)
        try:
            t = time.perf_counter()
            url = upload(folder, store, env)
            print(f"{store}: {tokens:,} tokens uploaded to {url} in {time.perf_counter() - t:.0f} s")
            rates: dict[str, list[float]] = {"local": [], store: []}
            cpu: dict[str, list[float]] = {"local": [], store: [], "server": []}
            for r in range(rounds):
                sides = (("local", mix, {}, None), (store, f"{url}/mix.txt", env, server.pid))
                for side, mix_path, side_env, pid in sides:
                    rep, cost = audit_in_child(side, mix_path, out, side_env, pid)
                    wall = cost["wall"]
                    cpu[side].append(cost["cpu"])
                    if pid:
                        cpu["server"].append(cost["server_cpu"])
                    asked = rep.pop("ranged")
                    if side != "local":  # the bucket's names as the local run names the same files
                        rep = json.loads(json.dumps(rep).replace(url, str(folder)))
                    rate = tokens / rep["timing"]["content_seconds"] / 1e6
                    rates[side].append(rate)
                    rec.timings(f"{store}.round{r}.{side}.process", "olmax", [wall], "s", PROCESS_WALL)
                    ok = found(rep, expected)
                    if not all(v for v in ok.values() if isinstance(v, bool)):
                        failed.append(f"{store} round {r} {side}: plants not found {ok}")
                    if side == "local":
                        local = rep
                        continue
                    if comparable(rep) != comparable(local):
                        failed.append(f"{store} round {r}: the report differs from the local one")
                    rec.note(f"{store}.round{r}.asked", asked)
                    print(
                        f"{store} round {r}: local {rates['local'][-1]:.1f}, {store} {rate:.1f} M tokens/s; {asked}"
                    )
            rec.figure(
                f"local_rate_{store}_run",
                rates["local"],
                "M tokens/s",
                about="content pass, mix on local disk",
            )
            rec.figure(
                f"{store}_rate",
                rates[store],
                "M tokens/s",
                about=f"content pass, mix read from the {store} server",
            )
            ratio = [b / a for a, b in zip(rates["local"], rates[store])]
            rec.figure(
                f"{store}_over_local",
                [100 * x for x in ratio],
                "%",
                about="bucket rate / local rate, per round",
            )
            rec.figure(
                f"{store}_requests_in_flight", [asked["most_in_flight"]], "requests", about="most at once"
            )
            rec.figure(
                f"{store}_requests_per_gb", [asked["requests"] / (asked["bytes"] / 1e9)], "requests/GB"
            )
            # where the bucket pass's time goes (both processes share the machine's cores), per GB of the mix
            gb = tokens * 4 / 1e9
            for key, side, about in (
                (
                    f"local_cpu_per_gb_{store}_run",
                    "local",
                    "the local audit process (hashing, reduces, plan)",
                ),
                (f"{store}_audit_cpu_per_gb", store, "the bucket audit process: the same work and its reads"),
                (f"{store}_server_cpu_per_gb", "server", "the server process"),
            ):
                rec.figure(
                    key, [c / gb for c in cpu[side]], "core-s/GB", about=about + ", CPU seconds per GB of mix"
                )
        finally:
            server.terminate()
            server.wait(30)
    rec.note(
        "shape",
        {"tokens": tokens, "files": args.files, "seq_len": L, "global_batch_size": G, "rounds": rounds},
    )
    rec.note("expected", expected)
    return rec.finish(failed)


if __name__ == "__main__":
    sys.exit(main())
