"""`olmax audit exposure --run DIR`: the stream and the last step come from a finished run's folder, and
the steps it reports are those `olmax data where` finds for the same spans up to that step."""

from __future__ import annotations

import json

from olmax.cli import main
from olmax.data.loader import open_loader
from olmax.data.stream import StreamSpec
from olmax.data.trace import Span, where
from tests.train.train_testdata import GBS, SEQ, run_train, write_config, write_mix


def test_exposure_of_a_finished_run(tmp_path):
    mix = write_mix(tmp_path / "data")
    config = write_config(tmp_path / "tiny.yaml", mix, steps=5, every=5)
    run_train(config, tmp_path / "run")
    part = str(tmp_path / "data" / "part-0.npy")
    leaks = {
        "contaminated": [
            {
                "eval": "qa",
                "id": "x",
                "score": 1.0,
                "documents": [
                    {"source": "web", "file": part, "doc": "#0", "token_start": 0, "token_end": 700}
                ],
            }
        ]
    }
    (tmp_path / "leaks.json").write_text(json.dumps(leaks))
    assert (
        main(
            [
                "audit",
                "exposure",
                "--run",
                str(tmp_path / "run"),
                "--leaks",
                str(tmp_path / "leaks.json"),
                "--out",
                str(tmp_path / "x.json"),
            ]
        )
        == 0
    )
    x = json.loads((tmp_path / "x.json").read_text())
    assert x["until_step"] == 5
    stream = StreamSpec(mix=mix, seq_len=SEQ, global_batch_size=GBS, seed=7, work_dir=str(tmp_path / "work"))
    want = sorted(
        {
            h["step"]
            for h in where(
                open_loader(stream, process_index=0, process_count=1), [Span(part, 0, 700)], until_step=5
            )
        }
    )
    (item,) = x["items"]
    assert item["steps"] == want and want and max(want) <= 5  # the whole file: served in most steps
