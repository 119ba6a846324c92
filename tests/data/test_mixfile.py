"""Mix files: OLMo-core's official mixes parse unchanged; prepare's mix.txt resolves to its folder."""

from __future__ import annotations

import os

import pytest

from olmax.data.mixfile import default_tokenizer_id, read_mix
from olmax.errors import OlmaxError


def _official_names() -> list[str]:
    import olmo_core

    folder = os.path.join(os.path.dirname(olmo_core.__file__), "data", "mixes")
    return sorted(f[:-4] for f in os.listdir(folder) if f.endswith(".txt"))


@pytest.mark.parametrize("name", _official_names())
def test_official_mixes_equal_olmo_core(name):
    from olmo_core.data import DataMix, TokenizerName

    want_paths, want_labels = DataMix(name).build("s3://ai2-llm", TokenizerName.dolma2)
    mix = read_mix(f"olmo-core:{name}", base_dir="s3://ai2-llm")
    assert list(mix.paths) == want_paths
    assert list(mix.labels) == want_labels


def test_prepare_style_mix_resolves_against_its_folder(tmp_path):
    (tmp_path / "sub").mkdir()
    mix_file = tmp_path / "sub" / "mix.txt"
    mix_file.write_text(
        "# made by prepare\n\nweb,shards/web-000.npy\n  code , /abs/code.npy \n"
        "wiki,https://example.org/{TOKENIZER}/w.npy\n"
    )
    mix = read_mix(str(mix_file))
    assert mix.paths == (
        str(tmp_path / "sub" / "shards" / "web-000.npy"),
        "/abs/code.npy",
        "https://example.org/allenai/dolma2-tokenizer/w.npy",
    )
    assert mix.labels == ("web", "code", "wiki")
    assert mix.label_names == ("web", "code", "wiki")
    assert read_mix(str(mix_file), base_dir=str(tmp_path)).paths[0] == str(
        tmp_path / "shards" / "web-000.npy"
    )
    assert read_mix(str(mix_file), base_dir="gs://b/x/").paths[0] == "gs://b/x/shards/web-000.npy"
    assert read_mix(str(mix_file), tokenizer="tok").paths[2] == "https://example.org/tok/w.npy"


def test_label_ids_follow_first_appearance(tmp_path):
    f = tmp_path / "m.txt"
    f.write_text("b,1.npy\na,2.npy\nb,3.npy\n")
    assert read_mix(str(f)).label_ids.tolist() == [0, 1, 0]


def test_tokenizer_names():
    assert default_tokenizer_id("OLMo-mix-0925-official") == "allenai/dolma3-tokenizer"
    assert default_tokenizer_id("/x/OLMo-mix-0925.txt") == "allenai/dolma2-tokenizer"
    assert default_tokenizer_id("v3-small-ppl-validation") == "dolma2-tokenizer"


def test_bad_mixes(tmp_path):
    f = tmp_path / "m.txt"
    f.write_text("# header\nweb,a.npy\njust-a-path.npy\n")
    with pytest.raises(OlmaxError, match=r"m\.txt:3: expected 'label,path'"):
        read_mix(str(f))
    f.write_text("# only comments\n\n")
    with pytest.raises(OlmaxError, match=r"m\.txt: the mix is empty"):
        read_mix(str(f))
    with pytest.raises(OlmaxError, match="mix file not found"):
        read_mix(str(tmp_path / "nope.txt"))
    with pytest.raises(OlmaxError, match="--base-dir"):
        read_mix("olmo-core:OLMo-mix-0925-official")
    with pytest.raises(OlmaxError, match="no official mix"):
        read_mix("olmo-core:not-a-mix", base_dir="/x")


def test_mix_file_at_a_url_resolves_against_its_folder():
    import fsspec

    fsspec.filesystem("memory").pipe("/mixes/v1/mix.txt", b"web,shards/a.npy\nweb,s3://b/c.npy\n")
    mix = read_mix("memory://mixes/v1/mix.txt")
    assert mix.paths == ("memory://mixes/v1/shards/a.npy", "s3://b/c.npy")
    with pytest.raises(OlmaxError, match="cannot read the mix file"):
        read_mix("memory://mixes/v1/missing.txt")


def test_a_mix_of_an_unfinished_prepare_says_so_and_to_rerun_through_the_cli(tmp_path):
    import subprocess
    import sys

    out = tmp_path / "shards"  # what a prepare killed before mix.txt leaves: its journal and shards
    (out / "code").mkdir(parents=True)
    (out / ".olmax-prepare.json").write_text("{}")
    (out / "code" / "code-00000.npy").write_bytes(b"\0" * 64)
    p = subprocess.run(
        [sys.executable, "-m", "olmax.cli", "data", "plan", "--mix", str(out / "mix.txt")]
        + ["--seq-len", "4", "--global-batch-size", "2"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    assert f"{out} is an unfinished `olmax data prepare` output" in lines[0]
    assert lines[0].endswith("rerun the same `olmax data prepare` command to finish it")
