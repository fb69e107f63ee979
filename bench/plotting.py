"""Saving the benchmark plots small: results are committed, and the working tree travels to the
GPU machine under a 64 MiB limit next to the CuTe DSL bundle."""
from __future__ import annotations


def save_figure(fig, path: str, dpi: int = 110, **kw) -> None:
    """``fig.savefig`` as PNG, then re-saved as a 64-colour palette image when Pillow is there
    (line plots lose nothing visible; ~4x smaller)."""
    fig.savefig(path, dpi=dpi, **kw)
    try:
        from PIL import Image
    except ImportError:
        return
    with Image.open(path) as im:
        q = im.convert("RGB").quantize(colors=64, method=Image.Quantize.MEDIANCUT,
                                       dither=Image.Dither.NONE)
    q.save(path, optimize=True)
