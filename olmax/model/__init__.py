"""OLMo 3 in Flax: configs, layers, transformer, HF conversion, parity and FLOP counts."""

from olmax.model.config import (
    PRESETS,
    ModelConfig,
    YarnConfig,
    from_hf_config,
    olmo3_7b,
    olmo3_7b_hd256,
    olmo3_32b,
    tiny,
    to_hf_config,
)
from olmax.model.convert import from_hf, load_olmax, save_olmax, to_hf
from olmax.model.flops import FlopCount, flops_per_token, forward_flops
from olmax.model.transformer import Transformer, count_params, init_model

__all__ = [
    "PRESETS", "FlopCount", "ModelConfig", "Transformer", "YarnConfig", "count_params", "flops_per_token",
    "forward_flops", "from_hf", "from_hf_config", "init_model", "load_olmax", "olmo3_32b", "olmo3_7b",
    "olmo3_7b_hd256", "save_olmax", "tiny", "to_hf", "to_hf_config",
]
