"""The 66 books of the Protestant canon: OSIS ids in canonical order, a genre each, and the split
by book that every multilingual Bible recipe shares.

Genres (6, each with books in every split): ``law`` (the Pentateuch), ``history`` (Joshua to
Esther, and Acts), ``wisdom`` (Job to the Song of Songs), ``prophets`` (Isaiah to Malachi, and
Revelation, which calls itself a prophecy, Rev 1:3), ``gospels``, ``letters`` (Paul's and the
general letters).

Split by book, within each genre in canonical order: the genre's ``j``-th book (from 0) is ``dev``
when ``j % 4 == 1``, ``test`` when ``j % 4 == 2``, else ``train``.  So every genre has training,
dev and test books (the gospels: Matthew and John train, Mark dev, Luke test), about half of the
verses train, and no verse of an evaluation book is ever trained on — in any language, since
every recipe splits by this one function.
"""

from __future__ import annotations

from ptmkit.errors import PtmError

_GENRES: dict[str, tuple[str, ...]] = {
    "law": ("Gen", "Exod", "Lev", "Num", "Deut"),
    "history": ("Josh", "Judg", "Ruth", "1Sam", "2Sam", "1Kgs", "2Kgs", "1Chr", "2Chr", "Ezra", "Neh", "Esth", "Acts"),
    "wisdom": ("Job", "Ps", "Prov", "Eccl", "Song"),
    "prophets": ("Isa", "Jer", "Lam", "Ezek", "Dan", "Hos", "Joel", "Amos", "Obad", "Jonah", "Mic", "Nah", "Hab",
                 "Zeph", "Hag", "Zech", "Mal", "Rev"),
    "gospels": ("Matt", "Mark", "Luke", "John"),
    "letters": ("Rom", "1Cor", "2Cor", "Gal", "Eph", "Phil", "Col", "1Thess", "2Thess", "1Tim", "2Tim", "Titus",
                "Phlm", "Heb", "Jas", "1Pet", "2Pet", "1John", "2John", "3John", "Jude"),
}

BOOKS: tuple[str, ...] = (
    "Gen", "Exod", "Lev", "Num", "Deut", "Josh", "Judg", "Ruth", "1Sam", "2Sam", "1Kgs", "2Kgs", "1Chr", "2Chr",
    "Ezra", "Neh", "Esth", "Job", "Ps", "Prov", "Eccl", "Song", "Isa", "Jer", "Lam", "Ezek", "Dan", "Hos", "Joel",
    "Amos", "Obad", "Jonah", "Mic", "Nah", "Hab", "Zeph", "Hag", "Zech", "Mal",
    "Matt", "Mark", "Luke", "John", "Acts", "Rom", "1Cor", "2Cor", "Gal", "Eph", "Phil", "Col", "1Thess", "2Thess",
    "1Tim", "2Tim", "Titus", "Phlm", "Heb", "Jas", "1Pet", "2Pet", "1John", "2John", "3John", "Jude", "Rev",
)  # canonical order (OSIS ids)
NEW_TESTAMENT: frozenset[str] = frozenset(BOOKS[BOOKS.index("Matt"):])
GENRES: tuple[str, ...] = tuple(_GENRES)
GENRE: dict[str, str] = {book: genre for genre, books in _GENRES.items() for book in books}
SPLIT: dict[str, str] = {
    book: ("dev" if j % 4 == 1 else "test" if j % 4 == 2 else "train")
    for books in _GENRES.values() for j, book in enumerate(books)
}


def book_of(ref: str) -> str:
    """``"Gen.1.3"`` -> ``"Gen"``, checked against :data:`BOOKS`."""
    book = ref.split(".", 1)[0]
    if book not in GENRE:
        raise PtmError(f"unknown book {book!r} in the reference {ref!r}; OSIS ids are {', '.join(BOOKS[:5])}, ...")
    return book


def split_of(ref: str) -> str:
    """The split (``train``, ``dev``, ``test``) of a reference's book."""
    return SPLIT[book_of(ref)]


def genre_of(ref: str) -> str:
    return GENRE[book_of(ref)]
