"""Zip-based files (.docx, .pptx, .odt, .odp, .epub) read within bounds and written back member for member.

A zip a user hands us may be a bomb: its central directory is read first, and the file is refused before
anything is unpacked when it has more entries or more unpacked bytes than FileLimits allows. zipfile stops
each member at the size the directory declares (and fails its CRC if the data says otherwise), so the bound
holds for what is read. XML members are parsed without entities, DTDs or the network (lxml)."""

from __future__ import annotations

import io
import zipfile
import zlib

from lxml import etree

from model.errors import FileError
from model.files import FileLimits

XML = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False)


class Zipped:
    """A zip's members, read within limits; write() packs them again in their order, each as it was stored
    (EPUB and OpenDocument need their `mimetype` first and uncompressed)."""

    def __init__(self, name: str, data: bytes, limits: FileLimits) -> None:
        self.name = name
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as z:
                self.infos = z.infolist()
                if len(self.infos) > limits.max_entries:
                    raise FileError(name, f"{len(self.infos):,} entries, more than the limit of {limits.max_entries:,}")
                size = sum(i.file_size for i in self.infos)
                if size > limits.max_unzipped_bytes:
                    raise FileError(
                        name, f"{size:,} bytes unpacked, more than the limit of {limits.max_unzipped_bytes:,}"
                    )
                self.members = {i.filename: z.read(i) for i in self.infos}
        except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, RuntimeError, ValueError) as e:
            raise FileError(name, f"not a readable zip file ({e})") from None

    def xml(self, member: str) -> etree._ElementTree:
        try:
            return etree.ElementTree(etree.fromstring(self.members[member], XML))
        except etree.XMLSyntaxError as e:
            raise FileError(self.name, f"{member} is not well-formed XML ({e})") from None

    def write(self, changed: dict[str, bytes]) -> bytes:
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w") as z:
            for info in self.infos:
                z.writestr(info, changed.get(info.filename, self.members[info.filename]))
        return out.getvalue()


def xml_bytes(tree: etree._ElementTree) -> bytes:
    """An XML part as it was declared (encoding, standalone)."""
    info = tree.docinfo
    return bytes(
        etree.tostring(tree, xml_declaration=True, encoding=info.encoding or "UTF-8", standalone=info.standalone)
    )
