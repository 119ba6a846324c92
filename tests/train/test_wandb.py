"""The W&B logger (wandb.project): one W&B run per launch with the resolved config, the train record under
OLMo-core's names at every logged step (equal to metrics.jsonl), a real offline run written under RUN/wandb, and
the failures that must stop before the run folder is touched."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest

from olmax.cli import main
from olmax.train.config import load_config, to_dict
from olmax.train.loop import train
from tests.train.train_testdata import metrics, write_config, write_mix


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    root = tmp_path_factory.mktemp("wandb")
    return write_config(root / "test.yaml", write_mix(root / "data"), steps=3, every=3)


class FakeWandb:
    """Records what the logger asks of the wandb package."""

    def __init__(self):
        self.inits, self.logs, self.finished = [], [], 0

    def init(self, **kwargs):
        self.inits.append(kwargs)
        return SimpleNamespace(
            log=lambda scalars, step: self.logs.append((step, scalars)), finish=self.finish
        )

    def finish(self):
        self.finished += 1


def test_each_step_goes_to_wandb_under_olmo_core_names(config, tmp_path, monkeypatch):
    fake = FakeWandb()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    cfg = load_config(config, ["wandb.project=olmo3-repro", "wandb.mode=offline", "wandb.tags=[a,b]"])
    train(cfg, tmp_path / "run1")
    [init] = fake.inits
    assert init["project"] == "olmo3-repro" and init["mode"] == "offline" and init["tags"] == ["a", "b"]
    assert init["name"] == "run1" and init["dir"] == str(tmp_path / "run1" / "wandb")
    assert init["config"]["wandb"]["project"] == "olmo3-repro"
    assert init["config"]["model"] == to_dict(cfg)["model"]
    recs = metrics(tmp_path / "run1")
    assert [step for step, _ in fake.logs] == [r["step"] for r in recs] == [1, 2, 3]
    for (_, scalars), rec in zip(fake.logs, recs, strict=True):
        assert scalars["train/CE loss"] == rec["loss"] and scalars["optim/LR (group 0)"] == rec["lr"]
        assert scalars["optim/total grad norm"] == rec["grad_norm"]
        assert scalars["throughput/total tokens"] == rec["tokens"]
    assert fake.finished == 1


def test_a_real_offline_run_is_written_under_the_run_folder(config, tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")
    train(load_config(config, ["wandb.project=olmax-test", "wandb.mode=offline"]), tmp_path / "run")
    [data] = (tmp_path / "run" / "wandb").glob("wandb/offline-run-*/run-*.wandb")
    raw = data.read_bytes()
    for name in (b"train/CE loss", b"optim/LR (group 0)", b"throughput/device/TPS"):
        assert name in raw
    assert len(metrics(tmp_path / "run")) == 3


@pytest.mark.parametrize(
    "overrides, env, message",
    [
        (["wandb.project=p"], {}, "needs WANDB_API_KEY"),
        (["wandb.project=p", "wandb.mode=offline"], {"wandb": None}, "wandb package is not installed"),
        (["wandb.project=p", "wandb.mode=later"], {}, "wandb.mode='later': one of online, offline, disabled"),
    ],
)
def test_what_cannot_log_stops_before_the_run_folder(
    config, tmp_path, monkeypatch, capsys, overrides, env, message
):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    for module, value in env.items():
        monkeypatch.setitem(sys.modules, module, value)  # None: `import wandb` raises ImportError
    run = tmp_path / "run"
    assert main(["train", "--config", config, "--run-dir", str(run), *overrides]) == 2
    err = capsys.readouterr().err
    assert err.startswith("olmax: error:") and message in err and "Traceback" not in err
    assert not run.exists()
