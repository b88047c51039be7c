"""The paper's Transformer: architecture, tokenization, checkpoints, beam search, the Translator API."""

from model.config import PRESETS, DecodingConfig, ModelConfig
from model.errors import CheckpointError, ConfigError, InputError, InputTooLongError, ModelError
from model.output import AttentionMaps, Hypothesis, Output
from model.transformer import Transformer
from model.translator import Translator

__all__ = [
    "PRESETS",
    "AttentionMaps",
    "Hypothesis",
    "Output",
    "CheckpointError",
    "ConfigError",
    "DecodingConfig",
    "InputError",
    "InputTooLongError",
    "ModelConfig",
    "ModelError",
    "Transformer",
    "Translator",
]
