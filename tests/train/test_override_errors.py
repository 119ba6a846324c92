"""Override errors name the override as typed and suggest the closest key; file errors still name the file."""

from __future__ import annotations

import pytest

from olmax.cli import main


@pytest.mark.parametrize(
    "override, said",
    [
        (
            "optim.learning_rate=1e-3",
            "override optim.learning_rate=1e-3: optim has no key 'learning_rate' (did you mean lr?)",
        ),
        ("optim.warmup=5", "(did you mean warmup_steps?)"),
        ("model.n_layer=2", "override model.n_layer=2: model has no key 'n_layer' (did you mean n_layers?)"),
        ("train.stepz=3", "(did you mean steps?)"),
        ("optm.lr=1", "override optm.lr=1: unknown section(s) optm (did you mean optim?)"),
        ("model.rope_scaling.factr=2", "model.rope_scaling has no key 'factr' (did you mean factor?)"),
        ("optim.lr=fast", "override optim.lr=fast: 'fast' is not a valid float"),
        ("train.steps=ten", "override train.steps=ten: 'ten' is not a valid int"),
    ],
)
def test_an_override_error_names_the_override_not_the_preset(override, said, capsys):
    assert main(["train", "--config", "tiny", "--dry-run", override]) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("olmax: error: "), err
    assert said in err and "tiny.yaml" not in err


def test_a_file_error_still_names_the_file(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("model:\n  preset: tiny\noptim:\n  learning_rate: 1.0e-3\n")
    assert main(["train", "--config", str(bad), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert f"{bad}: optim: unknown key(s) learning_rate (did you mean lr?)" in err
