"""The paper's Transformer: architecture, tokenization, checkpoints, beam search, the Translator API."""

from model.config import PRESETS, DecodingConfig, ModelConfig
from model.errors import CheckpointError, ConfigError, InputError, InputTooLongError, ModelError
from model.transformer import Transformer
from model.translator import Translation, Translator

__all__ = [
    "PRESETS",
    "CheckpointError",
    "ConfigError",
    "DecodingConfig",
    "InputError",
    "InputTooLongError",
    "ModelConfig",
    "ModelError",
    "Transformer",
    "Translation",
    "Translator",
]
