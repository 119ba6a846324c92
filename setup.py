"""The one thing pyproject.toml cannot say without setuptools' experimental table: prepare's compiled
JSON-lines reader (olmax/data/jsonl_scan.c: plain C against Python's own headers, no library). It is optional:
where no C compiler is, the install goes on without it and prepare reads every line with simdjson and
json.loads instead, with the same documents, errors and bytes, at more CPU (docs/tokenizers.md)."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("olmax.data.jsonl_scan", ["olmax/data/jsonl_scan.c"], optional=True)])
