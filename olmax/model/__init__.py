"""OLMo 3 in Flax: configs, layers, transformer, HF conversion, parity and FLOP counts.

Public API (resolved lazily: `import olmax.model` stays free of JAX): the presets and `ModelConfig`;
`from_hf(path)` / `to_hf(model, path)` and olmax's own checkpoint format (`load_olmax`, `save_olmax`);
`Transformer`, `init_model`, `count_params`; `flops_per_token`, `forward_flops`.
"""

from olmax.lazy import lazy_exports

__getattr__, __all__ = lazy_exports(
    __name__,
    {
        "PRESETS": "olmax.model.model_config",
        "ModelConfig": "olmax.model.model_config",
        "YarnConfig": "olmax.model.model_config",
        "from_hf_config": "olmax.model.model_config",
        "to_hf_config": "olmax.model.model_config",
        "olmo3_7b": "olmax.model.model_config",
        "olmo3_7b_hd256": "olmax.model.model_config",
        "olmo3_32b": "olmax.model.model_config",
        "tiny": "olmax.model.model_config",
        "from_hf": "olmax.model.convert",
        "to_hf": "olmax.model.convert",
        "load_olmax": "olmax.model.convert",
        "save_olmax": "olmax.model.convert",
        "FlopCount": "olmax.model.flops",
        "flops_per_token": "olmax.model.flops",
        "forward_flops": "olmax.model.flops",
        "Transformer": "olmax.model.transformer",
        "count_params": "olmax.model.transformer",
        "init_model": "olmax.model.transformer",
    },
)
