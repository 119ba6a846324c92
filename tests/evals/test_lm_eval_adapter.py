"""The `olmax` lm-eval model: loglikelihoods and greedy generations equal transformers on the same
weights, and lm-eval runs local arrow tasks (multiple choice, generation, rolling perplexity) end to end
offline through the adapter."""

import json
import math
from types import SimpleNamespace

import pytest
import torch

QUESTIONS = [
    {"question": "The quick brown fox", "choices": [" jumps", " sleeps", " photosynthesis"], "label": 0},
    {"question": "def add(a, b):", "choices": [" return a + b", " print(a)"], "label": 0},
    {"question": "Question: Who proposed evolution?\nAnswer:", "choices": [" Darwin", " Newton"], "label": 0},
    {"question": "Ünïcödé naïve", "choices": [" cafés", " dogs"], "label": 1},
]


@pytest.fixture(scope="module")
def hf_model(hf_checkpoint):
    from transformers import Olmo3ForCausalLM

    m = Olmo3ForCausalLM.from_pretrained(str(hf_checkpoint), torch_dtype=torch.float32).eval()
    m.config._attn_implementation = "eager"
    return m


@pytest.fixture(scope="module")
def lm(hf_checkpoint):
    from olmax.evals.lm_eval_adapter import OlmaxLM

    return OlmaxLM(checkpoint=str(hf_checkpoint), batch_size="4", max_length=64)


def torch_loglik(hf_model, ctx_ids, cont_ids):
    ids = ctx_ids + cont_ids
    with torch.no_grad():
        logp = torch.log_softmax(hf_model(torch.tensor([ids])).logits[0].double(), -1)
    n = len(ctx_ids)
    return float(sum(logp[n - 1 + j, t] for j, t in enumerate(cont_ids)))


def transformers_mc_accuracy(hf_model, tokenizer, docs, max_length: int, delimiter: str = " ") -> float:
    """lm-eval's multiple-choice `acc` over (context, choices, gold index) docs, scored with transformers:
    each choice follows the context after lm-eval's default target delimiter, the pair is tokenized
    whole and split at the context's length, left-truncated to max_length + 1 tokens, and a doc counts
    when the gold choice has the highest loglikelihood."""
    correct = 0
    for ctx, choices, gold in docs:
        n_ctx = len(tokenizer.encode_batch([ctx])[0])
        scores = []
        for choice in choices:
            whole = tokenizer.encode_batch([ctx + delimiter + choice])[0]
            n_cont = len(whole) - n_ctx
            whole = whole[-(max_length + 1) :]
            n_cont = min(n_cont, len(whole) - 1)
            scores.append(torch_loglik(hf_model, whole[:-n_cont], whole[-n_cont:]))
        correct += int(max(range(len(scores)), key=scores.__getitem__) == gold)
    return correct / len(docs)


def test_loglikelihood_matches_transformers(lm, hf_model, tokenizer):
    reqs = [SimpleNamespace(args=(q["question"], c)) for q in QUESTIONS for c in q["choices"]]
    reqs.append(SimpleNamespace(args=("", "hello world")))  # empty context: conditioned on EOS
    got = lm.loglikelihood(reqs, disable_tqdm=True)
    for req, (lp, _) in zip(reqs, got):
        ctx, cont = req.args
        whole = tokenizer.encode_batch([ctx + cont])[0]
        ctx_ids = tokenizer.encode_batch([ctx])[0] if ctx else [tokenizer.eos_token_id]
        cont_ids = whole[len(ctx_ids) :] if ctx else whole
        assert lp == pytest.approx(torch_loglik(hf_model, ctx_ids, cont_ids), rel=1e-4, abs=1e-4)


def test_rolling_and_generation_match_transformers(lm, hf_model, tokenizer):
    text = "The quick brown fox jumps over the lazy dog. " * 4  # > max_length 64 tokens: several windows
    ids = tokenizer.encode_batch([text])[0]
    assert len(ids) > 64
    [lp] = lm.loglikelihood_rolling([SimpleNamespace(args=(text,))], disable_tqdm=True)
    eos = tokenizer.eos_token_id
    expected, done = 0.0, 0
    stream = [eos] + ids
    while done < len(ids):  # each window predicts up to 64 new tokens from at most 64 input tokens
        take = min(64, len(ids) - done)
        window = stream[: done + take + 1][-65:]
        expected += torch_loglik(hf_model, window[:-take], window[-take:])
        done += take
    assert lp == pytest.approx(expected, rel=1e-4)

    prompt = "def add(a, b):"
    [text_out] = lm.generate_until([SimpleNamespace(args=(prompt, {"until": ["zzz"], "max_gen_toks": 6}))])
    buf = tokenizer.encode_batch([prompt])[0]
    gen = []
    with torch.no_grad():
        for _ in range(6):
            nxt = int(hf_model(torch.tensor([buf])).logits[0, -1].argmax())
            buf.append(nxt)
            gen.append(nxt)
    if eos in gen:
        gen = gen[: gen.index(eos)]
    assert text_out == tokenizer.decode(gen)


TASKS = {
    "olmax_toy_mc": """
task: olmax_toy_mc
dataset_path: arrow
dataset_kwargs:
  data_files:
    validation: {arrow}
validation_split: validation
output_type: multiple_choice
doc_to_text: "{{{{question}}}}"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: label
metric_list:
  - metric: acc
""",
    "olmax_toy_gen": """
task: olmax_toy_gen
dataset_path: arrow
dataset_kwargs:
  data_files:
    validation: {arrow}
validation_split: validation
output_type: generate_until
doc_to_text: "{{{{question}}}}"
doc_to_target: "{{{{choices[label]}}}}"
generation_kwargs:
  until: ["\\n"]
  max_gen_toks: 4
metric_list:
  - metric: exact_match
""",
    "olmax_toy_ppl": """
task: olmax_toy_ppl
dataset_path: arrow
dataset_kwargs:
  data_files:
    validation: {arrow}
validation_split: validation
output_type: loglikelihood_rolling
doc_to_text: ""
doc_to_target: "{{{{question}}}}"
metric_list:
  - metric: word_perplexity
  - metric: bits_per_byte
""",
}


def test_lm_eval_runs_local_tasks_end_to_end(lm, hf_model, tokenizer, tmp_path, monkeypatch):
    import datasets

    from olmax.evals.lm_eval_adapter import TaskRun, evaluate

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    datasets.Dataset.from_list(QUESTIONS).save_to_disk(str(tmp_path / "ds"))
    arrow = next((tmp_path / "ds").glob("*.arrow"))
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    for name, body in TASKS.items():
        (tasks / f"{name}.yaml").write_text(body.format(arrow=arrow))
    res = evaluate(lm, list(TASKS), TaskRun(include_path=str(tasks), include_defaults=False))["results"]
    # accuracy: the choice with the highest loglikelihood, computed by transformers
    docs = [(q["question"], q["choices"], q["label"]) for q in QUESTIONS]
    want = transformers_mc_accuracy(hf_model, tokenizer, docs, max_length=64)
    assert res["olmax_toy_mc"]["acc,none"] == pytest.approx(want)
    assert res["olmax_toy_gen"]["exact_match,none"] == 0.0  # a random model does not answer
    eos = tokenizer.eos_token_id
    total_lp = sum(
        torch_loglik(hf_model, [eos], tokenizer.encode_batch([q["question"]])[0]) for q in QUESTIONS
    )
    n_bytes = sum(len(q["question"].encode()) for q in QUESTIONS)
    assert res["olmax_toy_ppl"]["bits_per_byte,none"] == pytest.approx(
        -total_lp / (n_bytes * math.log(2)), rel=1e-4
    )
    json.dumps(res)  # JSON-safe


def test_an_unknown_task_suggests_the_nearest_names_lm_eval_takes():
    from olmax.errors import OlmaxError
    from olmax.evals.lm_eval_adapter import TaskRun, evaluate

    with pytest.raises(
        OlmaxError, match=r"unknown lm-eval task\(s\) \['olmax_arc_eazy'\]; did you mean olmax_arc_easy"
    ):
        evaluate(None, ["olmax_arc_eazy"], TaskRun(include_defaults=False))
