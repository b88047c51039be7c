"""Files as batch jobs: a 1 MB text file and a 200-paragraph .docx, made of held-out sentences, translated by a
trained checkpoint through `transformer serve` (POST /translate_file, GET /jobs/{id} for progress, GET
/download_file/{id}) and through `transformer translate --file`, on the CPU. Reports the time, the sentences
a second, the server's resident memory before the file and its most while the job runs (VmRSS, read twice a
second) and the CLI's peak (model loading included), and checks that each
file comes back with its structure (its lines; its paragraphs and their bold runs) and that its text scores
the BLEU of the same sentences sent to Translator.translate.

    python benchmarks/files.py --model runs/demo-b/best \
        --jsonl runs/demo-b/data/test.jsonl runs/demo-b/data/dev.jsonl
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.paragraphs import paragraphs  # noqa: E402

MB = 1024 * 1024


def rss_kib(pid: int, field: str) -> int:
    """VmRSS of a process, in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise ValueError(field)


def text_file(sentences: list[str], size: int) -> tuple[bytes, list[str]]:
    """Lines of held-out sentences, in turn, until the file holds `size` bytes; and the lines."""
    lines, total, i = [], 0, 0
    while total < size:
        line = sentences[i % len(sentences)]
        lines.append(line)
        total += len(line.encode()) + 1
        i += 1
    return ("\n".join(lines) + "\n").encode(), lines


def docx_file(groups: list[list[str]], n: int) -> tuple[bytes, list[str]]:
    """n paragraphs of three held-out sentences each, the first word of each paragraph bold."""
    import docx

    d = docx.Document()
    texts = []
    for k in range(n):
        text = " ".join(groups[k % len(groups)])
        first, _, rest = text.partition(" ")
        p = d.add_paragraph()
        p.add_run(first).bold = True
        p.add_run(" " + rest)
        texts.append(text)
    out = io.BytesIO()
    d.save(out)
    return out.getvalue(), texts


def through_service(url: str, pid: int, name: str, data: bytes) -> dict[str, Any]:
    """Upload, follow the job's progress, download; time and the server's memory."""
    start = time.perf_counter()
    before = rss_kib(pid, "VmRSS")
    r = httpx.post(f"{url}/translate_file", files={"file": (name, data)}, timeout=600)
    r.raise_for_status()
    job, shown, peak = r.json(), -1.0, before
    while job["status"] in ("queued", "running"):
        peak = max(peak, rss_kib(pid, "VmRSS"))
        done, total = job["progress"]["done"], job["progress"]["total"]
        if done / total - shown >= 0.1:
            print(f"  {name}: {done}/{total} texts ({time.perf_counter() - start:.0f} s)", flush=True)
            shown = done / total
        time.sleep(0.5)
        job = httpx.get(f"{url}/jobs/{job['id']}").json()
    assert job["status"] == "done", job
    got = httpx.get(f"{url}/download_file/{job['id']}", timeout=600)
    got.raise_for_status()
    seconds = time.perf_counter() - start
    return {
        "seconds": seconds,
        "texts": job["progress"]["total"],
        "content": got.content,
        "rss_before_mib": before / 1024,
        "rss_peak_mib": rss_kib(pid, "VmHWM") / 1024,
    }


def through_cli(model: Path, path: Path, threads: int) -> dict[str, Any]:
    out = path.with_name("cli-" + path.name)
    start = time.perf_counter()
    cmd = [
        sys.executable,
        "-m",
        "service.start",  # the `transformer` command's entry point (its allocator included)
        "translate",
        "--model",
        str(model),
        "--threads",
        str(threads),
        "--file",
        str(path),
        "--out",
        str(out),
    ]
    subprocess.run(cmd, check=True, cwd=ROOT, stderr=subprocess.DEVNULL)
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # the largest child so far, MiB
    return {"seconds": time.perf_counter() - start, "content": out.read_bytes(), "peak_mib": peak}


def main() -> None:
    import docx
    import sacrebleu

    from model.translator import Translator

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--jsonl", type=Path, nargs="+", required=True)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--mb", type=float, default=1.0, help="size of the text file")
    p.add_argument("--paragraphs", type=int, default=200)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    groups, refs = paragraphs(args.jsonl)
    sentences = [s for g in groups for s in g]
    reference = dict(zip(sentences, (t for g in refs for t in g), strict=True))
    work = Path(tempfile.mkdtemp())
    (work / "models").mkdir()
    (work / "models" / "model").symlink_to(args.model.resolve())
    txt, lines = text_file(sentences, int(args.mb * MB))
    doc, texts = docx_file(groups, args.paragraphs)
    (work / "big.txt").write_bytes(txt)
    (work / "report.docx").write_bytes(doc)
    translator = Translator.load(args.model, device="cpu", threads=args.threads)
    alone = {s: o.text for s, o in zip(sentences, translator.translate(sentences), strict=True)}

    port = 8765
    env = {
        **os.environ,
        "TRANSFORMER_MODELS_DIR": str(work / "models"),
        "TRANSFORMER_PORT": str(port),
        "TRANSFORMER_THREADS": str(args.threads),
        "TRANSFORMER_RATE_LIMIT": "0",
    }
    server = subprocess.Popen(
        [sys.executable, "-m", "service.cli", "serve"], cwd=ROOT, env=env, stderr=subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}"
    try:
        while True:
            try:
                if httpx.get(f"{url}/readyz").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        rows = []
        for name, data in (("big.txt", txt), ("report.docx", doc)):
            print(f"{name}: {len(data) / MB:.2f} MB through transformer serve", flush=True)
            served = through_service(url, server.pid, name, data)
            cli = through_cli(args.model, work / name, args.threads)
            if name.endswith(".txt"):
                out = served["content"].decode().split("\n")[:-1]
                structure = len(out) == len(lines)
                bleu = sacrebleu.corpus_bleu(out, [[reference[s] for s in lines]]).score
                base = sacrebleu.corpus_bleu([alone[s] for s in lines], [[reference[s] for s in lines]]).score
                sentences_n = len(lines)
            else:
                d = docx.Document(io.BytesIO(served["content"]))
                out = [p.text for p in d.paragraphs]
                bold = sum(any(r.bold for r in p.runs) for p in d.paragraphs)
                structure = len(out) == len(texts) and bold == len(texts)
                refs_p = [" ".join(refs[k % len(refs)]) for k in range(len(texts))]
                bleu = sacrebleu.corpus_bleu(out, [refs_p]).score
                base_out = [" ".join(alone[s] for s in groups[k % len(groups)]) for k in range(len(texts))]
                base = sacrebleu.corpus_bleu(base_out, [refs_p]).score
                sentences_n = 3 * len(texts)
                print(f"  paragraphs with a bold run placed: {bold}/{len(texts)}")
            row = {
                "file": name,
                "mb": len(data) / MB,
                "texts": served["texts"],
                "sentences": sentences_n,
                "service_s": served["seconds"],
                "service_sent_s": sentences_n / served["seconds"],
                "rss_before_mib": served["rss_before_mib"],
                "rss_peak_mib": served["rss_peak_mib"],
                "cli_s": cli["seconds"],
                "cli_peak_mib": cli["peak_mib"],
                "structure_kept": structure,
                "bleu": bleu,
                "bleu_sentences_alone": base,
                "cli_equals_service": cli["content"] == served["content"],
            }
            rows.append(row)
            print(json.dumps(row, indent=1), flush=True)
    finally:
        server.terminate()
        server.wait(timeout=30)
    print(
        f"{'file':<12} {'MB':>5} {'texts':>6} {'serve s':>8} {'sent/s':>7} {'RSS MiB before/peak':>20} "
        f"{'CLI s':>6} {'CLI MiB':>8} {'kept':>5} {'BLEU':>6} {'alone':>6}"
    )
    for r in rows:
        print(
            f"{r['file']:<12} {r['mb']:>5.2f} {r['texts']:>6} {r['service_s']:>8.1f} {r['service_sent_s']:>7.1f} "
            f"{r['rss_before_mib']:>9.0f}/{r['rss_peak_mib']:<10.0f} {r['cli_s']:>6.1f} {r['cli_peak_mib']:>8.0f} "
            f"{str(r['structure_kept']):>5} {r['bleu']:>6.2f} {r['bleu_sentences_alone']:>6.2f}"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
