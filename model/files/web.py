"""Web documents: an .html page, and an .epub's XHTML documents, each read as format "html" reads a text
(model.markup: runs between block tags, inline tags placed by the alignment, kept elements and attributes)."""

from __future__ import annotations

from pathlib import PurePosixPath

from model.files import FileLimits, decoded
from model.files.zipped import Zipped
from model.markup import Document, render
from model.output import Hypothesis

XHTML = frozenset({".xhtml", ".html", ".htm"})


class Page:
    """An .html file (UTF-8)."""

    align = True

    def __init__(self, name: str, fmt: str, data: bytes, limits: FileLimits) -> None:
        self.document = Document(decoded(name, data))

    @property
    def texts(self) -> list[str]:
        return self.document.texts

    def render(self, outputs: list[Hypothesis]) -> bytes:
        return render(self.document, outputs).encode()


class Epub:
    """An .epub: a zip whose XHTML documents are translated; everything else (the package, images, styles) is
    kept as it is."""

    align = True

    def __init__(self, name: str, fmt: str, data: bytes, limits: FileLimits) -> None:
        self.zipped = Zipped(name, data, limits)
        self.documents = {
            member: Document(decoded(f"{name}: {member}", raw))
            for member, raw in self.zipped.members.items()
            if PurePosixPath(member).suffix.lower() in XHTML
        }

    @property
    def texts(self) -> list[str]:
        return [t for d in self.documents.values() for t in d.texts]

    def render(self, outputs: list[Hypothesis]) -> bytes:
        it = iter(outputs)
        changed = {}
        for member, document in self.documents.items():
            changed[member] = render(document, [next(it) for _ in document.texts]).encode()
        return self.zipped.write(changed)
