"""The serving peer: what a user would deploy instead of `transformer serve`, a small FastAPI app around
CTranslate2 that translates each request on its own (LibreTranslate's shape): POST /translate {"q": text}
answers {"translatedText": ...}. A plain `def` route, so FastAPI runs it in its thread pool, and CTranslate2
runs `--inter-threads` translations at once with `--intra-threads` threads each.

    python benchmarks/peer_server.py --ct2 work/ct2 --spm bench/marian --port 8100 --beam-size 4
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import ctranslate2
import sentencepiece as spm
import uvicorn
from fastapi import FastAPI
from pydantic import BaseModel


class TranslateRequest(BaseModel):
    q: str


def create_app(args: argparse.Namespace) -> FastAPI:
    translator = ctranslate2.Translator(
        str(args.ct2),
        device=args.device,
        inter_threads=args.inter_threads,
        intra_threads=args.intra_threads,
        compute_type=args.compute_type,
    )
    source = spm.SentencePieceProcessor(model_file=str(args.spm / "source.spm"))
    target = spm.SentencePieceProcessor(model_file=str(args.spm / "target.spm"))
    app = FastAPI()

    @app.post("/translate")
    def translate(req: TranslateRequest) -> dict[str, Any]:
        pieces = source.encode(req.q, out_type=str) + ["</s>"]
        [result] = translator.translate_batch(
            [pieces],
            beam_size=args.beam_size,
            length_penalty=args.alpha,
            max_decoding_length=args.max_output,
        )
        return {"translatedText": target.decode_pieces(result.hypotheses[0])}

    @app.get("/readyz")
    def ready() -> dict[str, str]:
        return {"status": "ready"}

    return app


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ct2", type=Path, required=True, help="a CTranslate2 model directory")
    p.add_argument("--spm", type=Path, required=True, help="the directory of source.spm and target.spm")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--device", default="cpu")
    p.add_argument("--compute-type", default="float32")
    p.add_argument("--inter-threads", type=int, default=2)
    p.add_argument("--intra-threads", type=int, default=1)
    p.add_argument("--beam-size", type=int, default=4)
    p.add_argument("--alpha", type=float, default=0.6, help="length penalty |Y|^alpha")
    p.add_argument("--max-output", type=int, default=200)
    args = p.parse_args()
    uvicorn.run(create_app(args), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
