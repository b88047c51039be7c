"""The browser demo: the page (static/, ES modules served as they are) and the attention heatmap as a PNG file
(heatmap.py, for `transformer attention`)."""

from pathlib import Path

STATIC = Path(__file__).parent / "static"
