"""Examples of the API's bodies, shown by the OpenAPI document (/docs) for every endpoint."""

from __future__ import annotations

from typing import Any

from pydantic.config import JsonDict

TOKENS: list[Any] = ["▁Datei", "▁nicht", "▁gefunden", "."]
OUTPUT: JsonDict = {
    "text": "Datei nicht gefunden.",
    "score": -0.21,
    "tokens": TOKENS,
    "alternatives": [
        {
            "text": "Die Datei wurde nicht gefunden.",
            "score": -0.35,
            "tokens": ["▁Die", "▁Datei", "▁wurde", "▁nicht", "▁gefunden", "."],
        }
    ],
}

TEXT_REQUEST: JsonDict = {"q": "File not found.", "source": "en", "target": "de", "beam_size": 4, "n_best": 2}
TRANSLATE_RESPONSE: JsonDict = {"model": "en-de", "translatedText": "Datei nicht gefunden.", "translations": [OUTPUT]}
LANGUAGE: JsonDict = {"code": "en", "name": "English", "targets": ["de", "fr"]}
FRONTEND_SETTINGS: JsonDict = {
    "charLimit": 5000,
    "frontendTimeout": 500,
    "apiKeys": False,
    "keyRequired": False,
    "suggestions": False,
    "filesTranslation": True,
    "supportedFilesFormat": [".txt", ".docx"],
    "language": {"source": {"code": "auto", "name": "Auto Detect"}, "target": {"code": "de", "name": "German"}},
}
SUMMARIZE_RESPONSE: JsonDict = {
    "model": "docstrings",
    "summaries": [
        {
            "text": "Return the queue's length.",
            "score": -0.8,
            "tokens": ["▁Return", "▁the", "▁queue", "'s", "▁length", "."],
            "alternatives": [],
        }
    ],
}
JOB_REQUEST: JsonDict = {"texts": ["File not found.", "Disk full."], "source": "en", "target": "de"}
JOB_RESPONSE: JsonDict = {
    "id": "5f0c2f6d8e1a4b7c9d3e2f1a0b9c8d7e",
    "status": "done",
    "model": "en-de",
    "progress": {"done": 2, "total": 2},
    "offset": 0,
    "next_offset": None,
    "results": [
        {**OUTPUT, "alternatives": []},
        {"text": "Festplatte voll.", "score": -0.4, "tokens": ["▁Festplatte", "▁voll", "."], "alternatives": []},
    ],
}
ATTENTION_REQUEST: JsonDict = {
    "q": "File not found.",
    "model": "en-de",
    "n_best": 2,
    "hypothesis": 0,
    "kinds": ["cross"],
    "layers": [5],
}
ATTENTION_RESPONSE: JsonDict = {
    "model": "en-de",
    "hypothesis": 0,
    "text": "Datei fehlt.",
    "score": -0.3,
    "hypotheses": [{"text": "Datei fehlt.", "score": -0.3, "tokens": ["▁Datei", "▁fehlt", "."]}],
    "source_tokens": ["▁File", "▁not", "▁found", ".", "</s>"],
    "target_tokens": ["▁Datei", "▁fehlt", ".", "</s>"],
    "axes": {
        "cross": {
            "title": "Encoder–decoder attention",
            "rows": "output tokens",
            "cols": "source tokens",
            "row_tokens": ["▁Datei", "▁fehlt", ".", "</s>"],
            "col_tokens": ["▁File", "▁not", "▁found", ".", "</s>"],
        }
    },
    "cross": [
        [
            [
                [0.9, 0.05, 0.02, 0.02, 0.01],
                [0.05, 0.5, 0.4, 0.03, 0.02],
                [0.01, 0.02, 0.03, 0.9, 0.04],
                [0.02, 0.02, 0.02, 0.04, 0.9],
            ]
        ]
    ],
    "encoder": None,
    "decoder": None,
}
MODELS_RESPONSE: JsonDict = {
    "models": [
        {
            "id": "en-de",
            "task": "translation",
            "source": "en",
            "target": "de",
            "max_length": 256,
            "parameters": {"N": 6, "d_model": 512, "d_ff": 2048, "h": 8},
            "dtype": "auto",
            "decoding": {
                "beam_size": 4,
                "n_best": 1,
                "length_penalty": 0.6,
                "length_penalty_form": "gnmt",
                "min_length": 0,
                "no_repeat_ngram_size": 0,
                "early_stopping": True,
                "max_len_a": 1.0,
                "max_len_b": 50,
            },
        }
    ],
    "errors": {},
}
HEALTHZ: JsonDict = {"status": "ok"}
READYZ: JsonDict = {"status": "ready", "models": ["en-de"], "queue": "embedded"}
METRICS = 'transformer_queue_depth 0\ntransformer_requests_total{route="/translate",status="200"} 12\n'


def json_example(example: object, description: str = "OK") -> dict[str, Any]:
    """A route's `responses` entry holding one JSON example."""
    return {"description": description, "content": {"application/json": {"example": example}}}
