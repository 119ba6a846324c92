"""One eval-set name rule across commands: `olmax audit leaks` and `olmax eval heldout --leaks` name a set the
same way for a bare path, `NAME=PATH` and a bundled name, so the clean subset drops exactly the leaked
items; a leak list that names none of the sets given is an error naming both lists."""

import json
import random

import numpy as np
import pytest

from olmax.cli import main
from olmax.errors import OlmaxError
from olmax.evalsets.spec import parse_eval_spec, parse_eval_specs, set_name

WORDS = (
    "river stone lantern orchard copper meadow thistle harbor violet quarry falcon ember willow cedar "
    "marble tundra saffron glacier walnut beacon prairie cobalt juniper canyon velvet summit amber "
    "fjord nectar granite lagoon mosaic pepper quartz raven sable timber umber vapor wharf yarrow zephyr"
).split()


def test_the_name_rule():
    assert parse_eval_spec("sets/quiz.jsonl").name == "quiz"
    assert parse_eval_spec("quiz.jsonl.gz").name == "quiz"
    assert parse_eval_spec("/data/sciq/").name == "sciq"
    assert (parse_eval_spec("q=sets/quiz.jsonl").name, parse_eval_spec("q=sets/quiz.jsonl").source) == (
        "q",
        "sets/quiz.jsonl",
    )
    assert parse_eval_spec("sciq").name == "sciq" and parse_eval_spec("sciq").source == "sciq"
    assert parse_eval_spec("a/b=c/quiz.jsonl").name == "quiz"  # an '=' inside a path: still a bare path
    assert parse_eval_spec("gs://bucket/x/quiz.jsonl").name == "quiz"
    assert parse_eval_spec("c4=val.npy").tokens and not parse_eval_spec("quiz.jsonl").tokens
    with pytest.raises(OlmaxError, match="NAME="):
        set_name("sets/*.jsonl")
    with pytest.raises(OlmaxError, match="twice"):
        parse_eval_specs(["a/quiz.jsonl", "b/quiz.jsonl"])
    with pytest.raises(OlmaxError, match="--base-dir"):
        parse_eval_specs(["olmo-core:v3-small-ppl-validation"])


def _item(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(40)) + "."


def _shard(path, docs):
    """A raw uint32 dolma2 shard (each document + EOS) with its sidecar."""
    from collections import namedtuple

    from olmax.data.index import DOLMA2_EOS
    from olmax.data.shards import ShardWriter

    doc = namedtuple("Doc", "id src loc")
    w = ShardWriter(path, path.parent)
    toks = [np.asarray(list(t) + [DOLMA2_EOS], np.uint32) for t in docs]
    w.add_batch(
        np.concatenate(toks), [len(t) for t in toks], [doc(f"d{i}", "t", i + 1) for i in range(len(toks))], 0
    )
    w.close()


@pytest.fixture(scope="module")
def audited(tmp_path_factory):
    """`olmax audit leaks` over three sets given three ways: 10 of 30 quiz items, 4 of 12 other items and
    sciq's items 1, 3 and 5 are planted in the training mix."""
    from olmax.assets import tokenizer_path
    from olmax.data.tokenize import load_tokenizer
    from olmax.evalsets.read import load_eval

    root = tmp_path_factory.mktemp("names")
    rng = random.Random(0)
    (root / "sets").mkdir()
    quiz = [_item(rng) for _ in range(30)]
    other = [_item(rng) for _ in range(12)]
    (root / "sets" / "quiz.jsonl").write_text(
        "".join(json.dumps({"id": f"q{i}", "text": t}) + "\n" for i, t in enumerate(quiz))
    )
    (root / "sets" / "other.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in other))
    sciq = load_eval("sciq")[1]
    filler = [" ".join(rng.choice(WORDS[::-1]) for _ in range(80)) for _ in range(20)]
    planted = quiz[:10] + other[:4] + [sciq[i].text for i in (1, 3, 5)]
    docs = [f"{filler[k % 20]}\n{t}\n{filler[(k + 7) % 20]}" for k, t in enumerate(planted)] + filler
    tok = load_tokenizer(str(tokenizer_path("dolma2", quiet=True)))
    _shard(root / "train.npy", tok.encode_batch(docs))
    (root / "mix.txt").write_text(f"train,{root / 'train.npy'}\n")
    quiz_path, other_path = str(root / "sets" / "quiz.jsonl"), str(root / "sets" / "other.jsonl")
    leaks = root / "leaks.json"
    argv = ["audit", "leaks", "--mix", str(root / "mix.txt"), "--gate", "none", "--out", str(leaks)]
    argv += ["--eval", quiz_path, "--eval", f"o={other_path}", "--eval", "sciq"]
    assert main(argv) == 0
    return {"root": root, "quiz": quiz_path, "other": other_path, "leaks": str(leaks)}


def _heldout(hf_checkpoint, out, *args):
    argv = ["eval", "heldout", "--checkpoint", str(hf_checkpoint), "--seq-len", "64", "--out", str(out)]
    return main([*argv, *args])


def test_audit_and_heldout_join_by_the_same_names(audited, hf_checkpoint, tmp_path, capsys):
    report = json.loads(open(audited["leaks"]).read())
    assert set(report["sets"]) == {"quiz", "o", "sciq"}
    assert {s: v["contaminated"] for s, v in report["sets"].items()} == {"quiz": 10, "o": 4, "sciq": 3}
    out = tmp_path / "r.json"
    # a bare path, NAME=PATH and a bundled name, each given as the audit was given it
    assert (
        _heldout(
            hf_checkpoint,
            out,
            "--eval",
            audited["quiz"],
            "--eval",
            f"o={audited['other']}",
            "--eval",
            "sciq",
            "--limit",
            "30",
            "--leaks",
            audited["leaks"],
        )
        == 0
    )
    by = {(r["eval"], r["subset"]): r for r in json.loads(out.read_text())["results"]}
    assert by["quiz", "all"]["documents"] == 30 and by["quiz", "clean"]["documents"] == 20
    assert by["quiz", "clean"]["tokens"] < by["quiz", "all"]["tokens"]
    assert by["quiz", "clean"]["ce"] != by["quiz", "all"]["ce"]
    assert by["o", "all"]["documents"] == 12 and by["o", "clean"]["documents"] == 8
    assert by["sciq", "all"]["documents"] == 30 and by["sciq", "clean"]["documents"] == 27


def test_a_leak_list_that_joins_nothing_is_an_error(audited, hf_checkpoint, tmp_path, capsys):
    out = tmp_path / "r.json"
    # the audit named it `o`; a bare path names it `other`: nothing joins
    assert _heldout(hf_checkpoint, out, "--eval", audited["other"], "--leaks", audited["leaks"]) == 2
    err = capsys.readouterr().err
    assert "olmax: error: --leaks" in err and "o, quiz, sciq" in err and "(other)" in err
    assert not out.exists()
    # a set the report did not audit gets no clean record (it would be the whole set)
    assert (
        _heldout(
            hf_checkpoint,
            out,
            "--eval",
            audited["quiz"],
            "--eval",
            f"x={audited['other']}",
            "--leaks",
            audited["leaks"],
        )
        == 0
    )
    subsets = [(r["eval"], r["subset"]) for r in json.loads(out.read_text())["results"]]
    assert subsets == [("quiz", "all"), ("quiz", "clean"), ("x", "all")]
