"""Offline lm-eval tasks over the bundled eval sets: `olmax_arc_easy`, `olmax_arc_challenge`, `olmax_boolq`,
`olmax_sciq`, `olmax_piqa`, `olmax_openbookqa`.

The task YAMLs are written at run time into a folder under the olmax cache, each pointing lm-eval's
`arrow` loader at the bundled set's .arrow files (so nothing is downloaded and no package data is needed);
pass that folder as an include path. Prompts follow lm-eval's own versions of these tasks (question,
then " answer" choices scored by loglikelihood; metrics acc and acc_norm). BoolQ's answer is a bool in
this copy, so its target maps it to 0/1.
"""

from __future__ import annotations

import json
from pathlib import Path

from olmax.assets import cache_dir, eval_set_path
from olmax.atomic import write_text

# task name -> (bundled set, prompt, choices, target); Jinja over one row of the set
TASKS: dict[str, tuple[str, str, str, str]] = {
    "olmax_arc_easy": (
        "arc_easy",
        "Question: {{question}}\nAnswer:",
        "{{choices.text}}",
        "{{choices.label.index(answerKey)}}",
    ),
    "olmax_arc_challenge": (
        "arc_challenge",
        "Question: {{question}}\nAnswer:",
        "{{choices.text}}",
        "{{choices.label.index(answerKey)}}",
    ),
    "olmax_openbookqa": (
        "openbookqa",
        "{{question_stem}}",
        "{{choices.text}}",
        "{{choices.label.index(answerKey)}}",
    ),
    "olmax_boolq": (
        "boolq",
        "{{passage}}\nQuestion: {{question}}?\nAnswer:",
        '["no", "yes"]',
        "{{1 if answer else 0}}",
    ),
    "olmax_sciq": (
        "sciq",
        "{{support}}\nQuestion: {{question}}\nAnswer:",
        "{{[distractor1, distractor2, distractor3, correct_answer]}}",
        "3",
    ),
    "olmax_piqa": ("piqa", "Question: {{goal}}\nAnswer:", "{{[sol1, sol2]}}", "{{label}}"),
}


def task_yaml(name: str, arrow_files: list[str]) -> str:
    """One task's YAML text (JSON is valid YAML, and quotes every template safely)."""
    _, prompt, choices, target = TASKS[name]
    spec = {
        "task": name,
        "dataset_path": "arrow",
        "dataset_kwargs": {"data_files": {"validation": arrow_files}},
        "validation_split": "validation",
        "output_type": "multiple_choice",
        "doc_to_text": prompt,
        "doc_to_choice": choices,
        "doc_to_target": target,
        "metric_list": [
            {"metric": "acc", "aggregation": "mean", "higher_is_better": True},
            {"metric": "acc_norm", "aggregation": "mean", "higher_is_better": True},
        ],
        "metadata": {"version": 1.0},
    }
    return json.dumps(spec, indent=2) + "\n"


def bundled_task_dir(names: list[str] | None = None) -> Path:
    """Write the YAMLs of `names` (default: all) under the olmax cache and return that folder."""
    out = cache_dir() / "lm-eval-tasks"
    out.mkdir(parents=True, exist_ok=True)
    for name in names or list(TASKS):
        folder = Path(eval_set_path(TASKS[name][0], quiet=True))
        arrows = sorted(str(p) for p in folder.glob("*.arrow"))
        text = task_yaml(name, arrows)
        path = out / f"{name}.yaml"
        if path.is_file() and path.read_text() == text:
            continue
        write_text(path, text)
    return out
